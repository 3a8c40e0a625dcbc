"""calimon.sandbox: runaway, greedy and hostile snippets are stopped and leave nothing behind."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import pytest

from calimon.sandbox import run_python

REPO = Path(__file__).resolve().parents[1]


def test_a_normal_snippet_runs_and_reports():
    res = run_python("import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)\n")
    assert res.ok and res.stdout.strip() == "42" and "warn" in res.stderr
    assert not run_python("raise SystemExit(3)").ok


def test_a_runaway_loop_is_stopped_by_the_timeout():
    res = run_python("while True:\n    pass\n", timeout_s=1.0)
    assert res.timed_out and res.returncode is None and not res.ok
    assert res.seconds < 10


def test_a_sleeping_child_does_not_outlive_the_timeout():
    code = "import subprocess, sys\nsubprocess.run([sys.executable, '-c', " \
           "'import time; time.sleep(60)'])\n"
    res = run_python(code, timeout_s=1.0)
    # Either the child could not start (unprivileged sandbox user) or it was killed on time.
    assert (res.timed_out or not res.ok) and res.seconds < 10


def test_a_memory_hog_is_stopped():
    res = run_python("blob = bytearray(4 * 1024 ** 3)\nprint('allocated')\n", memory_mb=256)
    assert not res.ok and "allocated" not in res.stdout and "MemoryError" in res.stderr


def test_network_access_fails():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.3)
    port = server.getsockname()[1]
    code = f"""
import socket
for make in (socket.socket, lambda: socket.create_connection(("127.0.0.1", {port}), 1)):
    try:
        make()
        print("OPENED")
    except OSError:
        print("refused")
"""
    try:
        res = run_python(code)
        with pytest.raises(OSError):
            server.accept()
    finally:
        server.close()
    assert res.stdout.split() == ["refused", "refused"]


def test_relative_writes_stay_in_a_temp_dir_that_is_removed():
    code = ("import os, json\nopen('out.txt', 'w').write('x')\n"
            "print(json.dumps([os.getcwd(), os.path.exists('out.txt'), os.environ['HOME']]))\n")
    res = run_python(code)
    cwd, written, home = json.loads(res.stdout)
    assert written and home == cwd
    assert not Path(cwd).exists()
    assert not Path(cwd).resolve().is_relative_to(REPO)


def test_file_size_is_capped():
    res = run_python("open('big', 'wb').write(b'0' * (4 * 1024 * 1024))\n", fsize_mb=1)
    assert not res.ok


def test_a_hostile_snippet_cannot_write_into_the_repo_or_home(tmp_path):
    token = f"calimon-sandbox-probe-{uuid.uuid4().hex}"
    targets = [REPO / token, REPO / "calimon" / token, Path.home() / token]
    code = (f"for p in {[str(t) for t in targets]!r}:\n"
            "    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n")
    try:
        run_python(code)
        assert not [t for t in targets if t.exists()]
    finally:
        for t in targets:
            t.unlink(missing_ok=True)
