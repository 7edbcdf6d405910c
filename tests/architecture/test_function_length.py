"""Every function in weightgraft stays short enough to read in one screen.

Issue 19's rule, extended by issue 33 from the application wing to every package and top-level
module: no function over 60 lines unless its docstring says why (a line containing "Long
because"). The length counts the body from its first statement after the docstring, so a typer
command's option list (its signature) does not count. The packages are read from the source
tree, so a new one is inside the fence the day it is added.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "weightgraft"
TOP_LEVEL = "(top-level modules)"  # errors.py, runtime.py, atomic.py, ...
PACKAGES = sorted(path.name for path in SRC.iterdir() if (path / "__init__.py").is_file())
LIMIT = 60
REASON = "Long because"


def body_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the function's end."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return 0
    return node.end_lineno - body[0].lineno + 1


def long_functions(source: str) -> list[tuple[str, int]]:
    """(name, length) of every function over the limit whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = body_length(node)
            if length > LIMIT and REASON not in (ast.get_docstring(node) or ""):
                found.append((node.name, length))
    return found


def modules_of(unit: str) -> list[Path]:
    """The modules of one package (its subpackages included), or the top-level modules."""
    return sorted(SRC.glob("*.py")) if unit == TOP_LEVEL else sorted((SRC / unit).rglob("*.py"))


def test_the_checker_finds_a_long_function_and_accepts_a_stated_reason():
    long_body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT + 1))
    assert long_functions(f"def f():\n    '''Why.'''\n{long_body}\n") == [("f", LIMIT + 1)]
    assert long_functions(f"def f():\n    '''{REASON}: a table.'''\n{long_body}\n") == []
    short_body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    assert long_functions(f"def f():\n{short_body}\n") == []
    nested = f"def outer():\n    def inner():\n{long_body.replace('    ', '        ')}\n    return inner\n"
    assert ("inner", LIMIT + 1) in long_functions(nested)


def test_the_fence_holds_every_module():
    """The packages and the top-level modules together are the whole source tree."""
    assert {"engine", "attribution", "data", "training", "explore", "experiments"} <= set(PACKAGES)
    fenced = {path for unit in [*PACKAGES, TOP_LEVEL] for path in modules_of(unit)}
    assert fenced == set(SRC.rglob("*.py"))


@pytest.mark.parametrize("unit", [*PACKAGES, TOP_LEVEL])
def test_no_function_over_the_limit(unit):
    offenders = [
        f"{path.relative_to(SRC)}:{name} ({length} lines)"
        for path in modules_of(unit)
        for name, length in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"over {LIMIT} lines without '{REASON}' in the docstring: {offenders}"
