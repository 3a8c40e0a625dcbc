"""The `calimon` command line. Thin: each command parses its flags, calls one library
function and prints its result.

One registration convention: every command group is a module of this package with a
``register(app)`` function that mounts its commands on the main app; `BUILTIN` lists them in
``--help`` order. Third-party packages add commands the same way, through the
``calimon.commands`` entry point group (the object named is their ``register``):

    [project.entry-points."calimon.commands"]
    mytool = "mypackage.cli:register"

Shared flags and their defaults are declared once, in `calimon.cli.options`; how help is rendered
(flags, arguments, wrapping), once, in `calimon.cli.conventions`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import typer

from calimon.cli.conventions import conform

BUILTIN = ("curve", "score", "models", "data", "deploy", "serve", "review", "shift", "report",
           "compare", "spans", "heads", "robustness", "safety")
ENTRY_POINT_GROUP = "calimon.commands"

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Calibrated, span-level LLM misbehavior monitors.")


def _version(value: bool) -> None:
    if value:
        from calimon import __version__

        typer.echo(f"calimon {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print calimon's version and exit.")) -> None:
    """Calibrated, span-level LLM misbehavior monitors."""


def register_all(target: typer.Typer) -> list[str]:
    """Mount the built-in command groups, then every ``calimon.commands`` entry point, on
    ``target``; returns the plugin names mounted. A plugin that fails to load is reported
    on its name rather than breaking the built-in commands. Every command is then rendered by
    `calimon.cli.conventions`."""
    for name in BUILTIN:
        importlib.import_module(f"calimon.cli.{name}").register(target)
    mounted = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()(target)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the CLI down
            typer.echo(f"calimon: warning: command plugin {ep.name!r} ({ep.value}) not "
                       f"loaded: {exc}", err=True)
            continue
        mounted.append(ep.name)
    conform(target)
    return mounted


register_all(app)


def main() -> None:  # pragma: no cover - console entry point
    """The ``calimon`` console script."""
    app()
