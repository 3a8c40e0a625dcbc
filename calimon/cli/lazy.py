"""The main command group, loaded lazily: ``calimon --help`` lists every command from `COMMANDS`
(name, module, one-line help) without importing a command module, and a command's module is
imported only when that command runs or shows its help. Plugins (the ``calimon.commands``
entry point group) are loaded when the list of commands is asked for or a name is not a
built-in one. tests/test_cli_lazy.py checks `COMMANDS` against the real commands.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import NamedTuple

import typer
import typer._click as click
from typer.core import TyperCommand

from calimon.cli.conventions import CalimonGroup, conform


class Entry(NamedTuple):
    """One top-level command: the module under calimon.cli whose ``register(app)`` mounts it,
    and its help's first paragraph (what ``calimon --help`` lists)."""

    module: str
    help: str


# in ``calimon --help`` order: commands, then groups
COMMANDS: dict[str, Entry] = {
    "curve": Entry("curve", "Score a benchmark, calibrate, and trace the full Miss-Rate / "
                   "False-Alarm-Rate curve."),
    "score": Entry("score", "Score a benchmark with one monitor into the run store (any "
                   "backend, local or Ray)."),
    "thresholds": Entry("deploy", "Certify thresholds (FAR or MR <= alpha at 1 - delta) on "
                        "calib; report rates on test."),
    "escalate": Entry("deploy", "Design an auto-pass / review / auto-block policy on calib; "
                      "report it on test; save it."),
    "apply-policy": Entry("deploy", "Decide auto_pass / human_review / auto_block for each "
                          "scored transcript."),
    "pin-policy": Entry("deploy", "Pin a version-1 policy: embed its design run's calibration "
                        "map and monitor (version 2), so that calimon serve and the "
                        "integrations decide the same from any folder."),
    "serve": Entry("serve", "Serve POLICY's monitor (an external one's: its score in "
                   "each request) over HTTP: /v1/score, /v1/sessions/{id}/steps, /metrics, "
                   "/docs; --review: /review (docs/serve.md)."),
    "review-export": Entry("review", "Export a review queue's labelled traffic as a samples "
                           "JSONL, for `calimon curve` and `calimon escalate` to make the next "
                           "policy."),
    "promote": Entry("review", "Make the server's shadow candidate live, only if its "
                     "certificate holds on live labels and its MR gain is beyond its interval "
                     "(docs/review.md, Shadow and promote)."),
    "rollback": Entry("review", "Make the policy live before the server's last promotion live "
                      "again."),
    "shift": Entry("shift", "Does NEW_SET look like the calibration data, and does the "
                   "difference move the certificate? One verdict per target (no shift; shift, "
                   "certificate holds; shift breaks the certificate; for MR, or not judged "
                   "without labels) with its label plan, then the domain AUROC, permutation "
                   "p-value, what drives it, and naive vs shift-aware certificates on the new "
                   "data."),
    "recertify": Entry("shift", "Certify a policy's FAR / MR on the traffic it decided, from "
                       "reviewed labels (the review band plus the audit slice): from files, or "
                       "live from a server's review queue (--serve)."),
    "report": Entry("report", "Write a self-contained HTML report of a run (curves, "
                    "calibration, policy, transcripts)."),
    "compare": Entry("compare", "Several curve runs on one MR/FAR plot, with a leaderboard "
                     "table (AUROC, MR at fixed FAR, ECE, binary-protocol points, samples/s)."),
    "robustness": Entry("robustness", "Measure how often adversarial text in a response flips "
                        "a flagged transcript to a pass."),
    "control-safety": Entry("safety", "Certified safety of a ControlArena evaluation: audit "
                            "thresholds whose honest audit rate is certified at most each "
                            "budget, beside ControlArena's percentile threshold; caught and "
                            "uncaught successful attacks and safety with exact intervals at "
                            "both; usefulness."),
    "models": Entry("models", "Model configs and their availability."),
    "data": Entry("data", "Build, list, audit and import benchmarks."),
    "spans": Entry("spans", "Evidence spans: occlusion spans and grounded quotes vs gold "
                   "spans."),
    "heads": Entry("heads", "Probe heads on hidden states (train, list, bundle)."),
}

# the command modules, in the order they were mounted before commands were loaded lazily
BUILTIN = tuple(dict.fromkeys(e.module for e in COMMANDS.values()))


def mounted(register: Callable[[typer.Typer], None]) -> dict[str, click.Command]:
    """The click commands that ``register`` (a module's or a plugin's) mounts on an app of its
    own, rendered by `calimon.cli.conventions`, by name."""
    sub = typer.Typer()
    register(sub)
    conform(sub)
    return dict(typer.main.get_group(sub).commands)


def module_commands(module: str) -> dict[str, click.Command]:
    """The commands of the built-in module ``calimon.cli.<module>``."""
    return mounted(importlib.import_module(f"calimon.cli.{module}").register)


class LazyCommands(MutableMapping):
    """The main group's commands: the built-in names are known up front (`COMMANDS`); a
    command is built when it is looked up; plugins load on the first look-up that needs them
    (iterating over the names, or a name that is not built in)."""

    def __init__(self, load_plugins: Callable[[], dict[str, click.Command]]):
        self._built: dict[str, click.Command] = {}
        self._plugins: dict[str, click.Command] | None = None
        self._load_plugins = load_plugins

    def plugins(self) -> dict[str, click.Command]:
        """The plugin commands (loaded once)."""
        if self._plugins is None:
            self._plugins = {n: c for n, c in self._load_plugins().items() if n not in COMMANDS}
        return self._plugins

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._built and name in COMMANDS:
            for n, cmd in module_commands(COMMANDS[name].module).items():
                self._built.setdefault(n, cmd)
        if name in self._built:
            return self._built[name]
        return self.plugins()[name]

    def __setitem__(self, name: str, cmd: click.Command) -> None:
        self._built[name] = cmd

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        names = dict.fromkeys([*COMMANDS, *self._built, *self.plugins()])
        return iter(names)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._built or name in self.plugins()

    def listed(self, name: str) -> click.Command:
        """What ``calimon --help`` shows of ``name``: the command if built or a plugin, else
        a stand-in carrying its one-line help (no module imported)."""
        if name in self._built or name not in COMMANDS:
            return self[name]
        return TyperCommand(name=name, help=COMMANDS[name].help)


class LazyGroup(CalimonGroup):
    """The main ``calimon`` group: commands from `LazyCommands`; its own help lists them
    without loading them."""

    plugin_loader: Callable[[], dict[str, click.Command]] = staticmethod(dict)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        eager = dict(self.commands)
        self.commands = LazyCommands(type(self).plugin_loader)
        self.commands.update(eager)
        self._listing = False

    def list_commands(self, ctx) -> list[str]:
        """Every command's name, in help order (plugins last), none of them loaded."""
        return list(self.commands)

    def get_command(self, ctx, cmd_name: str):
        """The command ``cmd_name`` (its module imported), or while this group's own help is
        being written, its stand-in."""
        if self._listing:
            return self.commands.listed(cmd_name)
        return self.commands.get(cmd_name)

    def format_help(self, ctx, formatter) -> None:
        """The group's help: every command with its one-line help, no command module
        imported."""
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False


__all__ = ["BUILTIN", "COMMANDS", "Entry", "LazyCommands", "LazyGroup", "module_commands",
           "mounted"]
