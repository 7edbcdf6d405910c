"""The public surface documented (issue 39, item 6): every name `weightgraft` exports, and the
Grafter's researcher's methods, has a docstring with an `Args:` section naming each parameter of
its signature (a class: its constructor's), a `Returns:` section (functions and methods) and a
`Raises:` section, and type hints on every parameter."""

from __future__ import annotations

import inspect
import re

import pytest

import weightgraft
from weightgraft.engine.views import GrafterViews

VIEW_METHODS = ["score", "run", "cache", "lens", "applied"]


def _documented(obj) -> list[tuple[str, object, object]]:
    """(label, the object whose docstring counts, the callable whose signature it documents)."""
    out = []
    for name in weightgraft.__all__:
        value = getattr(weightgraft, name)
        out.append((name, value, value))
    out += [(f"Grafter.{m}", getattr(GrafterViews, m), getattr(GrafterViews, m)) for m in VIEW_METHODS]
    return out


def _parameters(target) -> list[inspect.Parameter]:
    skip = {"self", "cls"}
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p for p in inspect.signature(target).parameters.values() if p.name not in skip and p.kind not in kinds]


def _section(doc: str, title: str) -> str:
    match = re.search(rf"^{title}:\n((?:[ \t]+.*\n?|\n)*)", doc, re.M)
    return match.group(1) if match else ""


@pytest.mark.parametrize("label,obj,target", _documented(weightgraft), ids=lambda v: v if isinstance(v, str) else "")
def test_every_public_name_documents_each_argument(label, obj, target):
    doc = inspect.getdoc(obj) or ""
    params = _parameters(target)
    args = _section(doc, "Args")
    named = set(re.findall(r"^\s{4}\*{0,2}(\w+):", args, re.M))
    missing = [p.name for p in params if p.name not in named]
    assert not missing, f"{label}: the docstring's Args: section does not name {missing}"
    assert "\nRaises:\n" in doc, f"{label}: no Raises: section"
    if not inspect.isclass(obj):
        assert "\nReturns:\n" in doc, f"{label}: no Returns: section"
    unhinted = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    assert not unhinted, f"{label}: parameters without type hints: {unhinted}"


def test_the_checker_sees_a_missing_argument():
    def documented(a: int, b: int) -> int:
        """Add.

        Args:
            a: one.

        Returns:
            the sum.

        Raises:
            Nothing.
        """
        return a + b

    args = _section(inspect.getdoc(documented), "Args")
    assert set(re.findall(r"^\s{4}\*{0,2}(\w+):", args, re.M)) == {"a"}
