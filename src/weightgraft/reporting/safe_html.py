"""report.html is shared and opened in browsers, and much of it is text a user wrote (a run's
name, experiment titles and descriptions, condition names, paths, prompts). Markdown passes raw
HTML through and turns `[x](javascript:...)` into a live link, so the page is rebuilt here from
an allowlist: the tags and attributes the report itself writes survive, every other tag is shown
as text, and a link or image keeps its address only with a safe scheme (http, https, mailto, or
none: a relative path). `escape_text` is for user text placed in the Markdown itself, so that a
title such as `<b>x</b>` reads as written rather than as markup.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

# Tags the report's Markdown (tables, fenced code, md_in_html) and its own HTML produce.
ALLOWED_TAGS = {
    "a",
    "blockquote",
    "br",
    "code",
    "details",
    "div",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "img",
    "li",
    "ol",
    "p",
    "pre",
    "strong",
    "summary",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
}
VOID_TAGS = {"br", "hr", "img"}
SAFE_SCHEMES = {"", "http", "https", "mailto"}
_ALIGN = re.compile(r"text-align:\s*(left|right|center);?")
_LANGUAGE = re.compile(r"language-[\w+-]+")
_CODE_SPAN = re.compile(r"(`+[^`]*`+)")


def safe_url(url: str) -> bool:
    """True for an address a browser may follow from a shared page: http(s), mailto or relative.
    Control characters and whitespace are dropped first, as browsers drop them (`java\\tscript:`)."""
    cleaned = re.sub(r"[\x00-\x20\x7f]", "", html.unescape(url))
    try:
        scheme = urlsplit(cleaned).scheme.lower()
    except ValueError:
        return False
    return scheme in SAFE_SCHEMES


def _attribute_ok(tag: str, name: str, value: str | None) -> bool:
    value = value or ""
    if name in ("href", "src"):
        return (tag, name) in (("a", "href"), ("img", "src")) and safe_url(value)
    if name in ("alt", "title"):
        return True
    if name == "style":
        return tag in ("td", "th") and bool(_ALIGN.fullmatch(value.strip()))
    if name == "align":
        return tag in ("td", "th") and value in ("left", "right", "center")
    if name == "class":
        return tag == "code" and bool(_LANGUAGE.fullmatch(value))
    return tag == "details" and name == "open"


class _Sanitizer(HTMLParser):
    """Re-emits allowed tags with allowed attributes; everything else becomes visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.out: list[str] = []

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]], closing: str = "") -> None:
        if tag not in ALLOWED_TAGS:
            self.out.append(html.escape(self.get_starttag_text() or f"<{tag}>"))
            return
        kept = "".join(
            f' {name}="{html.escape(value or "", quote=True)}"'
            for name, value in attrs
            if _attribute_ok(tag, name, value)
        )
        self.out.append(f"<{tag}{kept}{closing}>")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs, " /" if tag in VOID_TAGS else "")

    def handle_endtag(self, tag: str) -> None:
        ok = tag in ALLOWED_TAGS and tag not in VOID_TAGS
        self.out.append(f"</{tag}>" if ok else html.escape(f"</{tag}>"))

    def handle_data(self, data: str) -> None:
        self.out.append(html.escape(data, quote=False))

    def handle_entityref(self, name: str) -> None:
        self.out.append(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self.out.append(f"&#{name};")

    def handle_comment(self, data: str) -> None:
        self.out.append(html.escape(f"<!--{data}-->"))

    def handle_decl(self, decl: str) -> None:
        self.out.append(html.escape(f"<!{decl}>"))

    def handle_pi(self, data: str) -> None:
        self.out.append(html.escape(f"<?{data}>"))

    def unknown_decl(self, data: str) -> None:
        self.out.append(html.escape(f"<![{data}]>"))


def sanitize(body: str) -> str:
    """`body` (HTML) with only the report's own tags, attributes and safe addresses left live."""
    parser = _Sanitizer()
    parser.feed(body)
    parser.close()
    return "".join(parser.out)


def escape_text(text: object) -> str:
    """User text for the report's Markdown: `<`, `>` and `&` as entities outside code spans, so
    that no markup in it is read as markup (the entities read as the characters in every
    Markdown viewer; inside backticks Markdown shows characters as they are already)."""
    parts = _CODE_SPAN.split(str(text))
    return "".join(part if i % 2 else html.escape(part, quote=False) for i, part in enumerate(parts))
