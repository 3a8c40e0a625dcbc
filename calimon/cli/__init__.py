"""The `calimon` command line. Thin: each command parses its flags, calls one library
function and prints its result.

One registration convention: every command group is a module of this package with a
``register(app)`` function that mounts its commands on the main app; `calimon.cli.lazy`
lists them (``COMMANDS``, in ``--help`` order) and imports a module only when one of its
commands runs or shows its help, so that ``calimon --help`` and a usage error answer at once.
Third-party packages add commands the same way, through the ``calimon.commands`` entry point
group (the object named is their ``register``):

    [project.entry-points."calimon.commands"]
    mytool = "mypackage.cli:register"

Shared flags and their defaults are declared once, in `calimon.cli.options`; how help is rendered
(flags, arguments, wrapping), once, in `calimon.cli.conventions`.
"""

from __future__ import annotations

import typer

from calimon.cli.conventions import conform
from calimon.cli.lazy import BUILTIN, LazyGroup, module_commands, mounted

ENTRY_POINT_GROUP = "calimon.commands"


def entry_points(group: str):
    """The installed entry points of ``group`` (importlib.metadata, imported when needed)."""
    from importlib.metadata import entry_points as installed

    return installed(group=group)


def _plugins(use):
    """``(name, use(register))`` of each ``calimon.commands`` entry point; one that fails to
    load or to register is reported on its name rather than breaking the built-in commands."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            yield ep.name, use(ep.load())
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the CLI down
            typer.echo(f"calimon: warning: command plugin {ep.name!r} ({ep.value}) not "
                       f"loaded: {exc}", err=True)


def plugin_commands() -> dict:
    """The commands every loadable plugin mounts, by name."""
    return {n: c for _, cmds in _plugins(mounted) for n, c in cmds.items()}


class _Main(LazyGroup):
    plugin_loader = staticmethod(plugin_commands)


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=_Main,
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
    ``target`` at once (``app`` loads them lazily instead); returns the plugin names mounted.
    A plugin that fails to load is reported on its name rather than breaking the built-in
    commands. Every command is then rendered by `calimon.cli.conventions`."""
    import importlib

    for name in BUILTIN:
        importlib.import_module(f"calimon.cli.{name}").register(target)
    names = [name for name, _ in _plugins(lambda register: register(target))]
    conform(target)
    return names


def main() -> None:  # pragma: no cover - console entry point
    """Run the command line on ``sys.argv`` (the ``calimon`` console script is
    `calimon.__main__.main`, which also catches a Ctrl-C during these imports)."""
    app(prog_name="calimon")


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "app", "main", "module_commands", "register_all"]
