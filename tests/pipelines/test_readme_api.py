"""The README's API example (issue 39, item 7) runs as written, on the tiny built-in models, and
prints the numbers a run config asking for the same conditions records."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pyarrow.parquet as pq

from tiny_world import base_config
from training_fixtures import tiny_artifacts
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.run_folder import slug
from weightgraft.pipelines import run_all
from weightgraft.training import builtin

README = Path(__file__).resolve().parents[2] / "README.md"
LATE = "O+FFN at LT, last quarter"
CONDITIONS = [
    "PRE",
    "SFT",
    "FE+LT",
    {"name": LATE, "grafts": [{"positions": "LT", "layers": "last_quarter", "components": ["o", "mlp"]}]},
]


def _snippet() -> str:
    section = README.read_text()[README.read_text().index("## The API") :]
    return section.split("```python", 1)[1].split("```", 1)[0]


def test_the_readme_example_prints_what_the_run_records(tmp_path, monkeypatch):
    art = tiny_artifacts()
    monkeypatch.setattr(builtin, "ensure_builtin", lambda *args, **kwargs: art)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(_snippet(), "README.md", "exec"), {})
    lines = printed.getvalue().splitlines()
    row = json.loads((art.relation_data / "eval.jsonl").read_text().splitlines()[0])
    assert lines[0] == f"{row['text']} -> {row['target']}"
    shown = {}
    for line in lines[1:]:
        match = re.fullmatch(r"(.+?)\s+p\(target\) = ([0-9.]+)  rank (\d+)", line)
        assert match, line
        shown[match.group(1)] = (float(match.group(2)), int(match.group(3)))
    data = tmp_path / "data"
    data.mkdir()
    (data / "eval.jsonl").write_text(json.dumps(row) + "\n")
    (data / "manifest.json").write_text(json.dumps({"name": "one", "seed": 0}))
    experiment = {"name": "readme", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": CONDITIONS}
    models = {"pre": str(art.pretrained), "sft": str(art.relation_model)}
    out = tmp_path / "run"
    run_all(parse_config(base_config(models, str(data), [experiment])), out, progress=False, report=False)
    assert list(shown) == ["PRE", "SFT", "FE+LT", LATE]
    for name, (prob, rank) in shown.items():
        (record,) = pq.read_table(out / "examples" / "readme" / f"{slug(name)}.parquet").to_pylist()
        assert f"{record['prob']:.4f}" == f"{prob:.4f}" and record["rank"] == rank, name
    assert len({p for p, _ in shown.values()}) > 1
