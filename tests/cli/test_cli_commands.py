"""Every command the CLI registers is in COMMAND_MODULES, so `main` imports only its module."""

from __future__ import annotations

import importlib


def test_every_registered_command_names_its_module():
    from weightgraft import cli

    cli._register_all()
    registered = {command.name for command in cli.app.registered_commands}
    assert registered == set(cli.COMMAND_MODULES)
    for command, module in cli.COMMAND_MODULES.items():
        source = importlib.import_module(f"weightgraft.cli.{module}")
        assert f'app.command("{command}")' in open(source.__file__).read(), (command, module)
