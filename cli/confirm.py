"""Asking before what cannot be undone (``queue delete``, ``queue purge``).

In a terminal the command asks (default no). Without a terminal to ask on (a script, a pipe, CI)
it refuses unless given ``--yes``, like ``gh repo delete``: a script that deletes a queue says
so in its text, and a pipe cannot answer by accident. The answer is read from stdin, the
question goes to stderr (stdout stays the command's output).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .common import InputError

F = TypeVar("F", bound=Callable[..., Any])


def yes_option(func: F) -> F:
    return click.option(
        "--yes", "-y", "yes", is_flag=True, help="Do not ask (needed without a terminal)."
    )(func)


def confirm(question: str, yes: bool) -> None:
    """Return when the user agreed (or gave --yes); else exit: status 1 for a "no", a usage
    error (status 2) when there is no terminal to ask on."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InputError("no terminal to ask for confirmation on: add --yes")
    if not click.confirm(question, default=False, err=True):
        raise click.ClickException("cancelled: nothing was changed")
