"""``leaseq auth``: make tokens and the hashes that go into an --auth-policy file."""

from __future__ import annotations

import sys

import click


@click.group("auth")
def auth_group() -> None:
    """Tokens for the server's --auth-policy file (which stores only their hashes)."""


@auth_group.command("hash-token")
@click.argument("token", required=False)
def hash_token_cmd(token: str | None) -> None:
    """Print the policy file's hash (sha256:...) of TOKEN, or of each line on standard input.

    Reading standard input keeps the token out of shell history and the process list:

        printf %s "$TOKEN" | leaseq auth hash-token
    """
    from leaseq.server.auth import hash_token

    if token is not None:
        click.echo(hash_token(token))
        return
    lines = [line.rstrip("\r\n") for line in sys.stdin]
    tokens = [line for line in lines if line]
    if not tokens:
        raise click.UsageError("no token: give one as an argument or on standard input")
    for line in tokens:
        click.echo(hash_token(line))


@auth_group.command("new-token")
def new_token_cmd() -> None:
    """Print a new random token (256 bits) and, on the next line, its hash for the policy.

    Give the first line to the client (--token / LEASEQ_TOKEN), put the second in the policy.
    """
    from leaseq.server.auth import hash_token, new_token

    token = new_token()
    click.echo(token)
    click.echo(hash_token(token))
