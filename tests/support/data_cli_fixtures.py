"""Running the real `weightgraft` command in a subprocess (the environment, PYTHONPATH included,
is inherited), as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from weightgraft.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""
