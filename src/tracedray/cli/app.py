"""The ``tracedray`` command: one Typer app; each command group lives in cli/commands/.

Heavy imports (grpc, the OTel SDK) happen inside command bodies, never at import
time, so ``tracedray --help`` stays fast.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="tracedray",
    help="Run a tracedray cluster and ask it what happened: memory, logs, traces, timelines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _print_version(value: bool) -> None:
    if value:
        from tracedray._version import __version__

        typer.echo(f"tracedray {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version,
                                       is_eager=True, help="Print the version and exit.")
          ) -> None:
    """Run a tracedray cluster and ask it what happened: memory, logs, traces, timelines."""


# Each module exposes register(app). Order is the order of --help.
COMMAND_MODULES = (
    "tracedray.cli.commands.cluster",  # start, stop, status
    "tracedray.cli.commands.trace",  # trace, timeline
    "tracedray.cli.commands.memory",  # memory
    "tracedray.cli.commands.logs",  # logs
    "tracedray.cli.commands.state",  # list, get, summary
    "tracedray.cli.commands.stack",  # stack
    "tracedray.cli.commands.top",  # top
    "tracedray.cli.commands.debug",  # debug
    "tracedray.cli.commands.auth",  # get-auth-token
)


def _register_all() -> None:
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
