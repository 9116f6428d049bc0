"""The ``gagpo`` command line: parse, validate, call one function, print.

Every command's logic lives in a module a test can call directly; this file only wires them.
Bad input (``UsageError``, ``ValueError`` from a registry, a missing file) becomes one red line on
stderr and exit code 2.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from gagpo_cli import __version__
from gagpo_cli.errors import UsageError

app = typer.Typer(
    name="gagpo",
    help="RL of LLM agents in multi-turn text environments: GAGPO and the methods it is compared with.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gagpo {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """RL of LLM agents in multi-turn text environments."""


@app.command("list")
def list_command(
    kind: Annotated[
        str | None, typer.Argument(help="What to list: estimators or environments (default: both).")
    ] = None,
) -> None:
    """List the registered estimators and environments (entry-point plugins)."""
    from gagpo_cli.listing import print_plugins

    print_plugins(kind)


def main() -> None:
    """Console-script entry: run the app, turning user errors into one line and exit code 2."""
    try:
        app(standalone_mode=False)
    except (UsageError, ValueError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click's own usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
        raise


if __name__ == "__main__":
    main()
