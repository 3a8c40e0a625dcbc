"""Ctrl-C exits 130 (`ExitCode.INTERRUPTED`) with one line and no traceback at any moment of a
command, the imports of its first second included: a real SIGINT is sent to a real
``python -m calimon`` process while it is importing typer, a command's module, and typer's
help renderer (each moment found from the process's own ``-X importtime`` lines)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from calimon.errors import ExitCode

ROOT = Path(__file__).resolve().parents[1]


def _interrupt_when(module: str, args: list[str]) -> tuple[int, list[str]]:
    """Run ``python -X importtime -m calimon ARGS``, send it SIGINT as soon as it has imported
    ``module``; its exit code and its stderr lines other than the import timings."""
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "calimon", *args],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "COLUMNS": "80"})
    lines, sent = [], False
    try:
        for line in proc.stderr:
            if line.startswith("import time:"):
                if not sent and line.split("|")[-1].strip() == module:
                    proc.send_signal(signal.SIGINT)
                    sent = True
                continue
            lines.append(line.rstrip("\n"))
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    assert sent, f"{module} was never imported"
    return code, lines


@pytest.mark.parametrize(("module", "args"), [
    ("typer._click.core", ["curve", "--help"]),        # importing the command line itself
    ("calimon.cli.options", ["curve", "--help"]),      # importing a command's module
    ("rich.table", ["thresholds", "--help"]),          # importing typer's help renderer
])
def test_ctrl_c_during_the_imports_exits_130_with_one_line(module, args):
    code, lines = _interrupt_when(module, args)
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
