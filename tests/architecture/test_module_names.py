"""One name, one module (issue 42): no two modules of weightgraft share a file name, so that a
name in a traceback, a docstring or a review says which file it is (once there were two
`study.py`, two `claims.py` and two `controls.py`). Package `__init__.py` files are exempt."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "weightgraft"


def shared_names(root: Path) -> dict[str, list[str]]:
    """Each module file name used more than once under `root` -> its paths, sorted."""
    paths: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.name != "__init__.py":
            paths[path.name].append(str(path.relative_to(root)))
    return {name: found for name, found in sorted(paths.items()) if len(found) > 1}


def test_the_checker_finds_a_shared_name(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
        (tmp_path / folder / "study.py").write_text("")
    (tmp_path / "a" / "claims.py").write_text("")
    assert shared_names(tmp_path) == {"study.py": [str(Path("a/study.py")), str(Path("b/study.py"))]}


def test_no_two_modules_share_a_file_name():
    assert SRC.is_dir()
    shared = shared_names(SRC)
    assert not shared, f"modules that share a file name (give each a name that says what it holds): {shared}"
