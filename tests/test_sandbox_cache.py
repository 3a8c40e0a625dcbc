"""The cache of sandboxed code-check results (calimon.data.codegen.results): a script that ran
before is read back, a timed-out one never is, and $CALIMON_SANDBOX_CACHE turns it off."""

from __future__ import annotations

import sqlite3

import pytest

from calimon.data.codegen import results
from calimon.errors import InputError

NOISE = "import os\nprint(os.urandom(8).hex())\n"  # a new output every real run


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_HOME", str(tmp_path))
    monkeypatch.delenv(results.CACHE_ENV, raising=False)
    return tmp_path


def _rows(home) -> int:
    with sqlite3.connect(home / "sandbox-results.sqlite") as conn:
        return conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]


def test_a_script_that_ran_is_read_back_and_refresh_runs_it_again(home, monkeypatch):
    first = results.run_checked(NOISE, timeout_s=30)
    assert first.ok and results.run_checked(NOISE, timeout_s=30) == first
    assert results.run_checked(NOISE, timeout_s=31).stdout != first.stdout  # another key
    monkeypatch.setenv(results.CACHE_ENV, "refresh")
    fresh = results.run_checked(NOISE, timeout_s=30)
    assert fresh.stdout != first.stdout
    monkeypatch.setenv(results.CACHE_ENV, "on")
    assert results.run_checked(NOISE, timeout_s=30).stdout == fresh.stdout  # refreshed
    monkeypatch.setenv(results.CACHE_ENV, "off")
    assert results.run_checked(NOISE, timeout_s=30).stdout != fresh.stdout
    assert _rows(home) == 2


def test_a_timed_out_run_is_never_stored(home):
    hung = results.run_checked("while True:\n    pass\n", timeout_s=1)
    assert hung.timed_out and hung.returncode is None
    assert _rows(home) == 0


def test_an_unknown_mode_names_the_variable(home, monkeypatch):
    monkeypatch.setenv(results.CACHE_ENV, "sometimes")
    with pytest.raises(InputError, match="CALIMON_SANDBOX_CACHE.*'sometimes'"):
        results.run_checked(NOISE, timeout_s=30)


def test_a_rebuild_reads_every_check_back_and_writes_the_same_benchmark(home, tmp_path,
                                                                       monkeypatch):
    from calimon.data import humaneval

    a = humaneval.build(tmp_path / "a", seed=0, limit=2)
    ran = []
    real = results.run_python
    monkeypatch.setattr(results, "run_python", lambda *args, **kw: ran.append(1) or real(
        *args, **kw))
    b = humaneval.build(tmp_path / "b", seed=0, limit=2)
    assert ran == [] and _rows(home) > 0
    assert a.read_bytes() == b.read_bytes()


SLOW_NOISE = "import os, time\ntime.sleep(2)\nprint(os.urandom(8).hex())\n"
OTHER_BUILD = (
    "import sys\nfrom calimon.data.codegen import results\n"
    "print(results.run_checked(sys.argv[1], timeout_s=30).stdout, end='')\n")


def _claims(home) -> list[tuple]:
    """The claims in the cache; none while another process is still creating its schema (the
    file exists from the moment it is opened, its tables from the migration's commit)."""
    with sqlite3.connect(home / "sandbox-results.sqlite") as conn:
        if conn.execute("PRAGMA user_version").fetchone()[0] < results.SCHEMA.version:
            return []
        return conn.execute("SELECT key, pid FROM claims").fetchall()


def _claim_for(home, key: str, pid: int) -> None:
    import socket
    import time

    results._get(key)  # makes the file, at the schema's version
    with sqlite3.connect(home / "sandbox-results.sqlite") as conn:
        conn.execute("INSERT INTO claims VALUES (?, ?, ?, ?)",
                     (key, pid, socket.gethostname(), time.time()))


def _never_run(monkeypatch) -> list[str]:
    ran: list[str] = []
    real = results.run_python
    monkeypatch.setattr(results, "run_python",
                        lambda code, **kw: ran.append(code) or real(code, **kw))
    return ran


def test_a_script_another_process_is_running_is_awaited_not_run_again(home, monkeypatch):
    """Two builds at once: the second reads the first's result of a script it claimed."""
    import os
    import subprocess
    import sys
    import time

    other = subprocess.Popen([sys.executable, "-c", OTHER_BUILD, SLOW_NOISE],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "CALIMON_HOME": str(home)})
    deadline = time.monotonic() + 60
    while not (home / "sandbox-results.sqlite").exists() or not _claims(home):
        assert other.poll() is None and time.monotonic() < deadline, "no claim was made"
        time.sleep(0.02)
    assert _claims(home)[0][1] == other.pid
    ran = _never_run(monkeypatch)
    mine = results.run_checked(SLOW_NOISE, timeout_s=30)
    theirs, _ = other.communicate(timeout=60)
    assert ran == [] and mine.ok and mine.stdout == theirs
    assert _claims(home) == [] and _rows(home) == 1


def test_a_claim_whose_process_is_gone_is_taken_over(home, monkeypatch):
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    _claim_for(home, results.result_key(NOISE, 30), gone.pid)
    ran = _never_run(monkeypatch)
    assert results.run_checked(NOISE, timeout_s=30).ok and len(ran) == 1
    assert _claims(home) == [] and _rows(home) == 1


def test_a_claim_that_outlives_the_time_limit_is_run_anyway(home, monkeypatch):
    import subprocess
    import time

    stuck = subprocess.Popen(["sleep", "60"])
    try:
        _claim_for(home, results.result_key(NOISE, 1), stuck.pid)
        monkeypatch.setattr(results, "CLAIM_MARGIN_S", 0.5)
        ran = _never_run(monkeypatch)
        started = time.monotonic()
        assert results.run_checked(NOISE, timeout_s=1).ok and len(ran) == 1
        assert 1.5 <= time.monotonic() - started < 30
    finally:
        stuck.kill()
        stuck.wait()
