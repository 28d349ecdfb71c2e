"""``tracedray get-auth-token``: print the token other machines need to join or connect.

The only command that prints the token (``tracedray start`` says where it is).
"""

from __future__ import annotations

import typer

from tracedray.cli.output import ADDRESS_HELP


def get_auth_token(
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Print the cluster's auth token (give it to other machines with TRACEDRAY_AUTH_TOKEN
    or `tracedray start --address ... --token ...`)."""
    from tracedray.cli.output import fail
    from tracedray.core import auth
    from tracedray.core.cluster_client import resolve_address
    from tracedray.exceptions import RayError

    try:
        resolved = resolve_address(address)
        choice = auth.find_token(resolved.gcs_address)
    except RayError as exc:
        raise fail(str(exc)) from exc
    if choice.token is None:
        raise fail(f"no auth token for the cluster at {resolved.gcs_address} on this machine "
                   f"(looked in {config_hint()}): run this on the head's machine, as the user "
                   "who started it")
    typer.echo(choice.token)


def config_hint() -> str:
    from tracedray import config
    from tracedray.core import auth

    return (f"{config.AUTH_TOKEN.name}, the session folder's {auth.TOKEN_FILE_NAME} file and "
            f"{auth.user_token_file()}")


def register(app: typer.Typer) -> None:
    app.command("get-auth-token")(get_auth_token)
