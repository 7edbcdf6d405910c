"""The `weightgraft` command line: one Typer app; each area registers its own commands.

Errors a user can fix (weightgraft.errors.UserError, and the library failures listed in
`user_message`) print one short line and exit with code 2; `--debug`, anywhere on the command
line, shows the traceback instead. docs/errors.md lists the messages.
"""

from __future__ import annotations

import os
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


def debugging() -> bool:
    return _DEBUG["on"] or os.environ.get("WEIGHTGRAFT_DEBUG", "") not in ("", "0")


def main() -> None:
    if "--debug" in sys.argv[1:]:
        _DEBUG["on"] = True
        sys.argv = [sys.argv[0], *(a for a in sys.argv[1:] if a != "--debug")]
    _register_all()
    app()
