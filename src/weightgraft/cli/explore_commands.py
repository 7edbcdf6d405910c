"""`weightgraft explore`: graft interactively in a browser (a local web app over `weightgraft.explore`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from weightgraft.cli import DEVICE_HELP, DTYPE_HELP, Dtype, check_device_option
from weightgraft.explore.open_session import (
    choose_models,
    open_session,
    parse_donors,
    refuse_unsafe_models,
    usable_device,
)
from weightgraft.explore.server import bind, serve


def explore_command(
    builtin: Literal["default", "tiny"] = typer.Option(
        "default", help="Built-in models to explore when no --recipient is given: default or tiny (built or reused)."
    ),
    recipient: str | None = typer.Option(None, help="Recipient model: a folder (safetensors) or a cached hub id."),
    donor: str | None = typer.Option(None, help="The donor model, named `donor` (or use --donors)."),
    donors: list[str] = typer.Option([], "--donors", help="More donors by name: NAME=PATH (repeat the option)."),
    data: Path | None = typer.Option(None, help="A weightgraft dataset folder: its prompts, with roles, in the page."),
    home: str | None = typer.Option(None, help="Where built-in data and models are cached."),
    device: str = typer.Option("cpu", callback=check_device_option, help=DEVICE_HELP),
    dtype: Dtype = typer.Option("float32", help=DTYPE_HELP),
    host: str = typer.Option("127.0.0.1", help="Address to listen on; anything but loopback opens it to your network."),
    port: int = typer.Option(8765, min=0, max=65535, help="Port (0: any free one)."),
    threads: int | None = typer.Option(
        1,
        min=1,
        help="Torch threads for the model calls; 1 answers fastest on small models, raise it for big ones on CPU.",
    ),
    progress: bool = typer.Option(True, help="Show progress while the built-in models are built."),
    trust_remote_code: bool = typer.Option(False, help="Run model code from the model folders (off by default)."),
) -> None:
    """Open a page where a click grafts a cell (position x layer x component) and the predictions
    of the recipient, each donor and the current graft update at once."""
    named = parse_donors(donors)
    device = usable_device(device)  # before the built-in models are built or any model loads
    if recipient is not None:
        refuse_unsafe_models(recipient, {"donor": donor, **named} if donor else named, trust_remote_code)
    bind(host, port).close()  # a taken port fails now, not after the models load
    try:
        recipient, named, data = choose_models(builtin, recipient, donor, named, data, home, progress)
        session = open_session(recipient, named, data, device, dtype, threads, trust_remote_code)
        serve(session, host, port, announce=lambda line: typer.echo(line))
    except KeyboardInterrupt:
        # Ctrl-C is how a server is stopped: a plain line, not the CLI's resume hint for `run`
        # (a built-in build stopped half-way is a ledger: the next start goes on from its last step).
        typer.echo("weightgraft explore: stopped")


def register(app: typer.Typer) -> None:
    app.command("explore")(explore_command)
