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
