"""report.html is shared and opened in browsers: text a user wrote (titles, descriptions, names)
is shown as text, never run as markup, and links keep only safe schemes."""

from __future__ import annotations

import re

import yaml

from cli_runner import invoke
from exp_fixtures import build_models
from tiny_world import write_dataset
from weightgraft.reporting.safe_html import sanitize

TITLE = "<script>alert('title')</script>"
DESCRIPTION = "[bad](javascript:alert(1)) [good](https://example.org/a?b=1) <img src=x onerror=alert(2)> `a<b`"


def _live_tags(page: str, tag: str) -> list[str]:
    return re.findall(rf"<{tag}\b[^>]*>", page, flags=re.IGNORECASE)


def test_hostile_titles_descriptions_and_names_are_text_in_report_html(tmp_path):
    models = build_models(tmp_path / "models", layers=2)
    write_dataset(tmp_path / "data")
    condition = {"name": "<em>c", "description": "<script>alert('cond')</script>", "grafts": [{"positions": "FE"}]}
    config = {
        "name": "hostile",
        "bootstrap": 10,
        "models": {"pre": models["pre"], "sft": models["sft"]},
        "datasets": {"relation": str(tmp_path / "data")},
        "experiments": [
            {
                "name": "e",
                "title": TITLE,
                "description": DESCRIPTION,
                "dataset": "relation",
                "recipient": "pre",
                "donor": "sft",
                "conditions": ["PRE", "SFT", condition],
            }
        ],
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    outcome = invoke("run", tmp_path / "run.yaml", "--out", tmp_path / "out", "--no-progress")
    assert outcome.code == 0, outcome.lines
    page = (tmp_path / "out" / "report.html").read_text()
    assert not _live_tags(page, "script") and not _live_tags(page, "em")
    assert "<h2>&lt;script&gt;alert('title')&lt;/script&gt;</h2>" in page
    assert "&lt;em&gt;c" in page and "&lt;script&gt;alert('cond')&lt;/script&gt;" in page
    assert not [tag for tag in _live_tags(page, "img") if "onerror" in tag.lower()]
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs == ["https://example.org/a?b=1"]  # the javascript: link is dead text, the https one live
    assert "<code>a&lt;b</code>" in page  # a code span is shown as written, not escaped twice


def test_the_sanitizer_keeps_the_reports_markup_and_drops_everything_else():
    kept = (
        '<details open=""><summary>s</summary><table><tr><th style="text-align: right;">x</th></tr></table>'
        '<pre><code class="language-json">{}</code></pre><img alt="p" src="plots/a.png" /></details>'
    )
    assert sanitize(kept) == kept
    for hostile in (
        '<a href="java&#x09;script:alert(1)">x</a>',
        '<a href=" JAVASCRIPT:alert(1)">x</a>',
        '<a href="data:text/html,<script>alert(1)</script>">x</a>',
        '<img src="javascript:alert(1)" />',
    ):
        assert "href=" not in sanitize(hostile) and "src=" not in sanitize(hostile), hostile
    assert sanitize('<svg onload="alert(1)"><td onclick="x">') == "&lt;svg onload=&quot;alert(1)&quot;&gt;<td>"
    assert sanitize('<p style="color:red">a</p>') == "<p>a</p>"
    assert sanitize("<!-- c --><iframe src=https://x></iframe>") == (
        "&lt;!-- c --&gt;&lt;iframe src=https://x&gt;&lt;/iframe&gt;"
    )
