"""The `weightgraft` command line: one Typer app; each area registers its own commands."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="weightgraft",
    help="Dynamic weight grafting for transformer language models.",
    no_args_is_help=True,
    add_completion=False,
)


def _register_all() -> None:
    # Imported here so that `import weightgraft` stays light.
    from weightgraft.cli import data_commands, experiment_commands

    data_commands.register(app)
    experiment_commands.register(app)
    from weightgraft.cli import localize_commands

    localize_commands.register(app)


def main() -> None:
    _register_all()
    app()
