"""docs/deployment.md is generated output: re-run its commands and examples, compare."""

from __future__ import annotations

import doctest
import hashlib
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calimon.cli import app
from calimon.deploy.policy_file import load_policy

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "deployment.md"


def _console_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every `$ ` line of the ```console blocks."""
    out: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            else:
                out[-1][1].append(line)
    return out


def _run(command: str) -> tuple[int, str]:
    if command.startswith("python -c "):
        exec(shlex.split(command)[2], {})
        return 0, ""
    args = shlex.split(command)
    assert args[0] == "calimon", command
    r = CliRunner().invoke(app, args[1:])
    return r.exit_code, r.output


# Replays every command of the doc on its full synthetic runs (about a minute on 2 cores): the
# slow suite. The default suite covers the same code paths on small inputs (test_deploy_cli,
# test_deploy_policies, test_shift, test_shift_recertify) and the committed policy below.
@pytest.mark.slow
def test_doc_commands_and_examples_reproduce(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = DOC.read_text(encoding="utf-8")
    blocks = _console_blocks(text)
    assert len(blocks) >= 6
    for command, expected in blocks:
        code, output = _run(command)
        # compared as printed, i.e. at the precision a user reads: a library upgrade breaks this
        # only if it changes a printed figure
        got = [line.rstrip() for line in output.splitlines()]
        assert got == [line.rstrip() for line in expected], command
        assert (code != 0) == any(line.startswith("calimon: error:") for line in got), command
    # code fences end an example's expected output, as a blank line would
    unfenced = re.sub(r"^```.*$", "", text, flags=re.M)
    test = doctest.DocTestParser().get_doctest(unfenced, {}, DOC.name, str(DOC), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 15 and result.failed == 0
    # the committed example is what the documented command writes, compared as parsed values
    # (floats to 1e-9 relative), independent of library versions: the CSV's bytes, and so the
    # source_sha256 the policy records, follow the installed numpy's float formatting. The fresh
    # hash is checked against the fresh file instead.
    committed, fresh = (load_policy(root / "configs" / "policies" / "synthetic-demo.yaml")
                        .model_dump() for root in (ROOT, tmp_path))
    csv_bytes = (tmp_path / "runs" / "synthetic" / "curve.csv").read_bytes()
    assert fresh["provenance"]["source_sha256"] == hashlib.sha256(csv_bytes).hexdigest()
    for d in (committed, fresh):
        d["provenance"].pop("calimon_version")
        d["provenance"].pop("source_sha256")
        d["pin"].pop("design_run_sha256")  # the same hash again
    assert committed == _approx(fresh)


OUTPUT_FLAGS = ("--out", "--html", "--markdown", "--report", "--screenshot")


def _git(*args: str) -> int:
    import subprocess

    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True).returncode


@pytest.mark.skipif(_git("rev-parse") != 0, reason="not a git checkout")
def test_every_file_the_doc_writes_is_ignored_or_tracked():
    """Running the doc's commands from the checkout leaves it clean: each output goes under an
    ignored folder (runs/) or rewrites a committed example (configs/policies/synthetic-demo.yaml,
    compared with a fresh one above)."""
    written = []
    for command, _ in _console_blocks(DOC.read_text(encoding="utf-8")):
        args = shlex.split(command)
        written += [b for a, b in zip(args, args[1:], strict=False) if a in OUTPUT_FLAGS]
    assert len(written) >= 5
    for path in written:
        ignored = _git("check-ignore", "-q", "--no-index", path) == 0
        tracked = _git("ls-files", "--error-unmatch", path) == 0
        assert ignored or tracked, path


def _approx(value):
    """``value`` with every float wrapped in pytest.approx (nested dicts and lists kept)."""
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_approx(v) for v in value)
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-9, abs=1e-12)
    return value


def test_committed_map_and_policy_load_and_read_the_same_scores():
    from pathlib import Path

    from calimon.calibration import load_map
    from calimon.deploy.policy_file import load_policy

    root = Path(__file__).resolve().parents[1]
    m = load_map(root / "calibration/smollm2-135m/humaneval-pairs.direct.verdict.platt.json")
    pol = load_policy(root / "configs/policies/smollm2-135m-humaneval-pairs.yaml")
    assert m.method == pol.calibration == "platt" and pol.score == "p_cal"
    assert pol.version == 2 and pol.pin.map_sha256 == m.digest()  # the policy pins this map
    assert (m.extra["model"], m.extra["readout"]) == (pol.model, pol.readout)
    p = m.predict([0.0, 0.5, 1.0])
    assert 0.0 < p[0] < p[1] < p[2] < 1.0  # a monotone map: thresholds on p_cal keep their order
