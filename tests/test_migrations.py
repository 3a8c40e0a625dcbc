"""Schema versions of calimon's SQLite files (calimon.migrations): the stores in tests/data/,
written by calimon 0.1.0 before versions existed, open and read back the same rows; migrations
run once, in order, all or nothing; a file newer than the code is refused."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from calimon.data.codegen import results
from calimon.migrations import NewerStoreError, Schema, migrate, schema_version
from calimon.sandbox import SandboxResult
from calimon.scoring.backends.journal import SCHEMA as JOURNAL_SCHEMA
from calimon.scoring.backends.journal import Journal, request_key
from calimon.scoring.store import SCHEMA as STORE_SCHEMA
from calimon.scoring.store import MonitorKey, RunStore, m001_verdicts
from calimon.verdict import Verdict

DATA = Path(__file__).parent / "data"
A = MonitorKey("tiny-qwen3", "rev-a1", "direct", "th-direct-1", "verdict")
B = MonitorKey("tiny-qwen3", "rev-a1", "evidence", "th-evid-2", "binary")
URL = "http://x/v1/chat/completions"


def _copy(name: str, to: Path) -> Path:
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DATA / name, to)
    return to


def _version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return schema_version(db)


def _set_version(path: Path, version: int) -> None:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {version}")
    db.close()


def test_the_committed_stores_predate_versions():
    for name in ("run-store-0.1.0.sqlite", "api-journal-0.1.0.sqlite",
                 "sandbox-results-0.1.0.sqlite"):
        assert _version(DATA / name) == 0, name


def test_a_run_store_of_0_1_0_opens_and_reads_the_same_readings(tmp_path):
    path = _copy("run-store-0.1.0.sqlite", tmp_path / "s.sqlite")
    with RunStore(path) as st:
        assert sorted(st.keys(), key=lambda k: k.readout) == [B, A]
        assert st.count() == 6 and st.count(A) == 4
        got = st.get(A, ["h-ok", "h-trunc", "h-parse", "h-err"])
        assert got["h-ok"] == Verdict("h-ok", "verdict", "ok", p_raw=0.25, format_mass=0.01,
                                      p_yes=0.2, p_no=0.6, tokens=120, seconds=0.5)
        assert got["h-ok"].extra == {"strip": [[3, 9]]}
        assert got["h-trunc"].truncation == {"policy": "head_tail", "kept": 4000}
        assert got["h-parse"].status == "parse_failure" and got["h-parse"].p_raw is None
        assert got["h-err"].error == "RuntimeError: boom"
        assert st.missing(A, ["h-ok", "h-err", "new"]) == ["h-err", "new"]
        yes = st.get(B, ["h-ok"])["h-ok"]
        assert (yes.decision, yes.text, yes.evidence) == (True, "YES: it lies", ("it lies", "skøl"))
        assert st.get(B, ["h-no"])["h-no"].decision is False
        st.put(A, [Verdict("new", "verdict", "ok", p_raw=0.5)])
    assert _version(path) == STORE_SCHEMA.version == 1
    with RunStore(path) as st:
        assert st.count() == 7


def test_the_journal_and_sandbox_cache_of_0_1_0_read_back(tmp_path, monkeypatch):
    journal = Journal(_copy("api-journal-0.1.0.sqlite", tmp_path / "j.sqlite"))
    payload = {"model": "m", "messages": [{"role": "user", "content": "q1"}]}
    assert journal.get(request_key(URL, payload)) == {
        "choices": [{"message": {"content": "a1"}}], "usage": {"prompt_tokens": 6}}
    journal.close()
    assert _version(tmp_path / "j.sqlite") == JOURNAL_SCHEMA.version
    monkeypatch.setenv("CALIMON_HOME", str(tmp_path / "home"))
    cache = _copy("sandbox-results-0.1.0.sqlite", tmp_path / "home" / "sandbox-results.sqlite")
    assert results._get("k-fail") == SandboxResult(1, "", "AssertionError\n", False, 0.5)
    assert results._get("k-pass").stdout == "ok\n" and results._get("nope") is None
    assert _version(cache) == results.SCHEMA.version


def _counting(calls: list[str]):
    def m001(db):
        calls.append("m001")
        db.execute("CREATE TABLE IF NOT EXISTS t (a INTEGER)")

    def m002(db):
        calls.append("m002")
        db.execute("ALTER TABLE t ADD COLUMN b TEXT")

    return Schema("test file", (m001, m002))


def test_migrations_run_once_in_order(tmp_path):
    calls: list[str] = []
    schema = _counting(calls)
    path = tmp_path / "f.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    assert migrate(db, Schema("test file", schema.migrations[:1]), path) == 1
    assert migrate(db, schema, path) == 1 and calls == ["m001", "m002"]
    assert migrate(db, schema, path) == 0 and calls == ["m001", "m002"]
    assert schema_version(db) == 2
    db.execute("INSERT INTO t VALUES (1, 'x')")  # the second migration's column exists


def test_a_failing_migration_leaves_the_file_as_it_was(tmp_path):
    def m002(db):
        db.execute("CREATE TABLE half (a)")
        raise ValueError("bad migration")

    path = tmp_path / "f.sqlite"
    db = sqlite3.connect(path)  # the default isolation level, as the sandbox cache uses
    with pytest.raises(ValueError):
        migrate(db, Schema("test file", (lambda d: None, m002)), path)
    assert schema_version(db) == 0 and not db.in_transaction
    assert db.execute("SELECT name FROM sqlite_master WHERE name='half'").fetchall() == []


def test_a_migration_that_commits_halfway_is_caught(tmp_path):
    path = tmp_path / "f.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(RuntimeError, match="executescript"):
        migrate(db, Schema("test file", (lambda d: d.executescript("CREATE TABLE t (a);"),)),
                path)
    assert schema_version(db) == 0


def test_an_old_run_store_takes_a_new_migration(tmp_path):
    """What the next schema change will do: the 0.1.0 store gains a column, keeps its rows."""
    path = _copy("run-store-0.1.0.sqlite", tmp_path / "s.sqlite")
    schema = Schema("run store", (m001_verdicts,
                                  lambda d: d.execute("ALTER TABLE verdicts ADD COLUMN note TEXT")))
    db = sqlite3.connect(path, isolation_level=None)
    assert migrate(db, schema, path) == 2 and schema_version(db) == 2
    assert db.execute("SELECT COUNT(*) FROM verdicts WHERE note IS NULL").fetchone()[0] == 6


def test_processes_opening_one_old_file_at_once_migrate_it_once(tmp_path):
    calls: list[str] = []

    def slow(db):
        calls.append("m001")
        time.sleep(0.2)
        db.execute("CREATE TABLE t (a)")  # a second run would fail: no IF NOT EXISTS

    path, errors = tmp_path / "f.sqlite", []

    def open_it():
        try:
            migrate(sqlite3.connect(path, timeout=30), Schema("test file", (slow,)), path)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and calls == ["m001"]


@pytest.mark.parametrize("kind", ["run store", "journal", "sandbox cache"])
def test_a_file_from_a_newer_calimon_is_refused(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("CALIMON_HOME", str(tmp_path))
    name, schema, open_it = {
        "run store": ("run-store-0.1.0.sqlite", STORE_SCHEMA, lambda p: RunStore(p).close()),
        "journal": ("api-journal-0.1.0.sqlite", JOURNAL_SCHEMA,
                    lambda p: Journal(p).get("k")),
        "sandbox cache": ("sandbox-results-0.1.0.sqlite", results.SCHEMA,
                          lambda p: results._get("k")),
    }[kind]
    path = _copy(name, tmp_path / "sandbox-results.sqlite")
    _set_version(path, schema.version + 1)
    before = path.read_bytes()
    with pytest.raises(NewerStoreError) as err:
        open_it(path)
    message = str(err.value)
    assert str(path) in message and schema.name in message
    assert f"version {schema.version + 1}" in message and f"up to {schema.version}" in message
    assert path.read_bytes() == before and _version(path) == schema.version + 1
