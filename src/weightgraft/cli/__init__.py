"""The `weightgraft` command line: one Typer app; each area registers its own commands.

Errors a user can fix (weightgraft.errors.UserError, and the library failures listed in
`user_message`) print one short line and exit with code 2; `--debug`, anywhere on the command
line, shows the traceback instead. docs/errors.md lists the messages.
"""

from __future__ import annotations

import errno
import os
import re
import sys

import typer
from typer.core import TyperGroup

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
_DEBUG = {"on": False}  # set by `--debug` anywhere on the command line (or WEIGHTGRAFT_DEBUG=1)


class _Commands(TyperGroup):
    """Every command runs inside this: a user's error becomes one line and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            if debugging():
                raise
            typer.echo("interrupted; run the command again (`weightgraft run` resumes where it stopped)", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as err:  # noqa: BLE001 - sorted into user errors and bugs below
            message = None if debugging() else user_message(err)
            if message is None:
                raise  # click's own exits and usage errors, weightgraft's bugs, or --debug
            first, *rest = message.splitlines() or [type(err).__name__]
            typer.echo(f"error: {first}", err=True)
            for line in rest:
                typer.echo(f"  {line.strip()}", err=True)
            raise typer.Exit(EXIT_USER_ERROR) from None


app = typer.Typer(
    name="weightgraft",
    cls=_Commands,
    help="Dynamic weight grafting for transformer language models. Add --debug to see the traceback of an error.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    if app.registered_commands:  # tests call this once per CLI test
        return
    # Imported here so that `import weightgraft` stays light.
    from weightgraft.cli import data_commands, experiment_commands, reproduce_commands

    data_commands.register(app)
    experiment_commands.register(app)
    reproduce_commands.register(app)
    from weightgraft.cli import explore_commands, localize_commands

    localize_commands.register(app)
    explore_commands.register(app)


def user_message(err: BaseException) -> str | None:
    """The one-line message for an error the user can fix; None for anything else (a bug)."""
    import yaml
    from pydantic import ValidationError

    from weightgraft.errors import UserError

    if isinstance(err, UserError):
        return str(err)
    if getattr(err, "exit_code", None) == 2 and hasattr(err, "format_message"):
        # click's usage errors (typer's own copy of click included): a bad option value, an
        # unknown option or command, found while the command line is read.
        return " ".join(err.format_message().split())
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f" while writing {err.filename}" if err.filename else ""
        return (
            f"no space left on the device{where}; free some space (or write to another disk with --out) "
            "and run the command again: nothing half-written is kept"
        )
    if isinstance(err, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)):
        if err.filename:
            return f"{err.filename}: {err.strerror}; check the path and its permissions"
        return f"{err}; check the path"
    if isinstance(err, yaml.YAMLError):
        return f"bad YAML: {str(err).splitlines()[0]}; fix the syntax"
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"])) or err.title
        return f"invalid {err.title}: {where}: {first['msg']}; fix that field"
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text ({err.reason} at byte {err.start}); save the file as UTF-8"
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - safetensors is a dependency
        return None
    if isinstance(err, SafetensorError):
        return f"damaged safetensors file ({err}); save or download the model again"
    return None


DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")


def check_device(value: str) -> str:
    """A typer callback: `--device` is auto, cpu, mps, cuda or cuda:N (checked as the line is read)."""
    if not DEVICE_PATTERN.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
    return value


def check_positive(value: float | None) -> float | None:
    """A typer callback: a number that must be above 0 (a learning rate)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value} is not above 0; give a positive number")
    return value


def check_share(value: float) -> float:
    """A typer callback: a share in (0, 1] (a recovery target)."""
    if not 0 < value <= 1:
        raise typer.BadParameter(f"{value} is not in (0, 1]; give a share such as 0.9")
    return value


def debugging() -> bool:
    return _DEBUG["on"] or os.environ.get("WEIGHTGRAFT_DEBUG", "") not in ("", "0")


def main() -> None:
    if "--debug" in sys.argv[1:]:
        _DEBUG["on"] = True
        sys.argv = [sys.argv[0], *(a for a in sys.argv[1:] if a != "--debug")]
    _register_all()
    app()
