"""Ctrl-C exits 130 (`ExitCode.INTERRUPTED`) with one line and no traceback at any moment of a
command, the imports of its first second included: a real ``python -m calimon`` process sends
itself a real SIGINT as it starts importing typer, a command's module, and typer's help
renderer (an audit hook on the ``import`` event, installed by a ``sitecustomize`` on its path:
a signal sent from outside after an import line arrives may come after a fast process ended)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from calimon.errors import ExitCode

ROOT = Path(__file__).resolve().parents[1]


HOOK = """import os, signal, sys

def _hook(event, args, _at=os.environ.get("CALIMON_TEST_SIGINT_AT")):
    if event == "import" and args[0] == _at:
        print("SIGINT sent", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGINT)

sys.addaudithook(_hook)
"""


def _interrupt_when(module: str, args: list[str], tmp: Path) -> tuple[int, list[str]]:
    """Run ``python -m calimon ARGS``, which sends itself SIGINT as it starts importing
    ``module``; its exit code and its stderr lines (the hook's report of the signal apart)."""
    (tmp / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    path = os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")])
    # SIGINT as a terminal leaves it (a job started in the background by a script ignores it,
    # and a Python started so installs no KeyboardInterrupt handler)
    r = subprocess.run([sys.executable, "-m", "calimon", *args], cwd=ROOT, text=True,
                       capture_output=True, timeout=120,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                       env={**os.environ, "COLUMNS": "80", "PYTHONPATH": path,
                            "CALIMON_TEST_SIGINT_AT": module})
    lines = r.stderr.splitlines()
    assert "SIGINT sent" in lines, f"{module} was never imported: {lines}"
    return r.returncode, [ln for ln in lines if ln != "SIGINT sent"]


@pytest.mark.parametrize(("module", "args"), [
    ("typer._click.core", ["curve", "--help"]),        # importing the command line itself
    ("calimon.cli.options", ["curve", "--help"]),      # importing a command's module
    ("rich.table", ["thresholds", "--help"]),          # importing typer's help renderer
])
def test_ctrl_c_during_the_imports_exits_130_with_one_line(module, args, tmp_path):
    code, lines = _interrupt_when(module, args, tmp_path)
    assert code == ExitCode.INTERRUPTED, lines
    assert lines == ["calimon: interrupted"]


def test_a_scoring_run_that_said_what_it_kept_adds_no_second_line():
    from calimon.__main__ import _said

    inner = KeyboardInterrupt()
    inner.add_note("interrupted: 2 readings kept in the store")
    try:
        try:
            raise inner
        except KeyboardInterrupt as exc:
            raise SystemExit(130) from exc
    except SystemExit as outer:
        assert _said(outer)
    assert not _said(SystemExit(130)) and not _said(KeyboardInterrupt())
