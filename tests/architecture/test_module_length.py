"""No module of weightgraft is over 500 lines (issue 33): a file that long holds two ideas, and
is split where they part (the engine's `grafter.py` gave its masks, inputs, decoding and splice
plan their own modules). The whole source tree is checked, so a new package is inside the fence."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "weightgraft"
LIMIT = 500


def long_modules(root: Path, limit: int = LIMIT) -> list[str]:
    """`path (N lines)` of every module under `root` over `limit` lines, longest first."""
    lengths = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in root.rglob("*.py")}
    return [
        f"{path.relative_to(root)} ({count} lines)"
        for path, count in sorted(lengths.items(), key=lambda item: (-item[1], str(item[0])))
        if count > limit
    ]


def test_the_checker_finds_a_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * LIMIT)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    assert long_modules(tmp_path) == [f"{Path('sub/long.py')} ({LIMIT + 1} lines)"]


def test_no_module_over_the_limit():
    assert SRC.is_dir()
    offenders = long_modules(SRC)
    assert not offenders, f"modules over {LIMIT} lines (split them where their ideas part): {offenders}"
