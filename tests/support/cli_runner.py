"""The `weightgraft` command run in this process with typer's CliRunner (no interpreter start-up,
so a test can try many inputs): exit code, and what it printed on stdout and stderr."""

from __future__ import annotations

from dataclasses import dataclass

from typer.testing import CliRunner

from weightgraft.cli import _register_all, app


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    exception: BaseException | None

    @property
    def lines(self) -> list[str]:
        """Every non-blank line printed, stdout and stderr together."""
        return [line for line in (self.stdout + self.stderr).splitlines() if line.strip()]


def invoke(*args: str) -> Outcome:
    _register_all()
    result = CliRunner().invoke(app, [str(a) for a in args])
    return Outcome(result.exit_code, result.stdout, result.stderr, result.exception)


def one_line_error(outcome: Outcome) -> str:
    """The single line of a refused command (asserting exit code 2 and one line)."""
    assert outcome.code == 2, (outcome.code, outcome.lines, outcome.exception)
    assert len(outcome.lines) == 1, outcome.lines
    assert outcome.lines[0].startswith("error: "), outcome.lines
    return outcome.lines[0]
