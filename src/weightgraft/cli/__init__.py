"""The `weightgraft` command line: one Typer app; each area registers its own commands.

Errors a user can fix (weightgraft.errors.UserError, and the library failures listed in
`user_message`) print one short line and exit with code 2 here, and only here (`_Commands`);
`--debug`, anywhere on the command line, shows the traceback instead. docs/errors.md lists the
messages.

Start-up: `main` imports only the module of the command it runs (`COMMAND_MODULES`), so that
`weightgraft data` starts without torch; the command modules import the library at their top.
Measured with `python -X importtime -m weightgraft data --help`: importing every command module
cost about 4 s (torch and transformers through the run, localize and reproduce modules), the
data module alone well under 1 s.
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import sys
from typing import Literal

import typer
import yaml
from pydantic import ValidationError
from safetensors import SafetensorError
from typer.core import TyperGroup

from weightgraft.errors import UserError
from weightgraft.runtime import HOME_VARIABLE, check_device, home

EXIT_USER_ERROR = 2
DEVICE_HELP = "Device for every model: cpu, cuda, cuda:1, mps."
DTYPE_HELP = "float32, bfloat16 or float16."
# Options with a fixed set of values: typer checks them and lists them in --help.
Dtype = Literal["float32", "bfloat16", "float16"]
EXIT_INTERRUPTED = 130
_DEBUG = {"on": False}  # set by `--debug` anywhere on the command line (or WEIGHTGRAFT_DEBUG=1)
# The module that registers each command; `main` imports only the one it runs.
COMMAND_MODULES = {
    "data": "data_commands",
    "pretrain": "training_commands",
    "train": "training_commands",
    "average": "training_commands",
    "run": "experiment_commands",
    "merge": "experiment_commands",
    "demo": "experiment_commands",
    "reproduce": "reproduce_commands",
    "localize": "localize_commands",
    "explore": "explore_commands",
}


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


@app.callback()
def _group() -> None:
    """Keeps `weightgraft COMMAND` a group when only one command module is registered."""


def _register_all(only: str | None = None) -> None:
    """Register the commands of every module, or with `only` (a command name) just its module's."""
    names = [COMMAND_MODULES[only]] if only in COMMAND_MODULES else list(dict.fromkeys(COMMAND_MODULES.values()))
    registered = {c.name for c in app.registered_commands}
    for name in names:
        module = importlib.import_module(f"weightgraft.cli.{name}")
        if not any(command in registered for command, owner in COMMAND_MODULES.items() if owner == name):
            module.register(app)


def user_message(err: BaseException) -> str | None:
    """The one-line message for an error the user can fix; None for anything else (a bug)."""
    if isinstance(err, UserError):
        return str(err)
    if getattr(err, "exit_code", None) == 2 and hasattr(err, "format_message"):
        # click's usage errors (typer's own copy of click included): a bad option value, an
        # unknown option or command, found while the command line is read.
        return " ".join(err.format_message().split())
    disk = disk_problem(err)
    if disk is not None:
        return disk
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
    if isinstance(err, SafetensorError):
        return f"damaged safetensors file ({err}); save or download the model again"
    return None


def disk_problem(err: BaseException) -> str | None:
    """The one line for a write that the disk refused (full, or read-only), also where a library
    reports it in its own words (safetensors: "No space left on device (os error 28)")."""
    code = err.errno if isinstance(err, OSError) else None
    if isinstance(err, SafetensorError):
        found = re.search(r"os error (\d+)", str(err))
        code = int(found.group(1)) if found else None
    filename = getattr(err, "filename", None)
    if code in (errno.ENOSPC, errno.EDQUOT):
        where = f" while writing {filename}" if filename else ""
        return (
            f"no space left on the device{where}; free some space (or write to another disk with --out, "
            f"or move weightgraft's cache with {HOME_VARIABLE}) and run the command again: nothing half-written is kept"
        )
    if code == errno.EROFS:
        where = filename or "a folder weightgraft writes"
        return (
            f"{where} is on a read-only file system; give a writable --out, and set {HOME_VARIABLE} "
            f"(weightgraft's cache, now {home()}) to a writable folder"
        )
    return None


def check_device_option(value: str) -> str:
    """A typer callback: `--device` is auto, cpu, mps, cuda or cuda:N (checked as the line is read,
    by `runtime.check_device`)."""
    try:
        return check_device(value, auto=True)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None


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
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    _register_all(only=command)
    app()
