"""CI's CALIMON_STRICT_SKIPS=1 turns a skipped test into a failure (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SKIPPING = '''
import pytest

def test_needs_something_absent():
    pytest.skip("the frobnicator extra is not installed")

@pytest.mark.skipif(True, reason="condition")
def test_skipped_by_mark():
    pass

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False

def test_plain():
    assert True
'''


def _run(tmp_path: Path, strict: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    env = {"PATH": "/usr/bin:/bin", "CALIMON_STRICT_SKIPS": "1" if strict else "0"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_without_strict_mode_skips_pass(tmp_path):
    r = _run(tmp_path, strict=False)
    assert r.returncode == 0, r.stdout
    assert "2 skipped" in r.stdout and "1 xfailed" in r.stdout


def test_strict_mode_fails_every_skip_and_names_the_reason(tmp_path):
    r = _run(tmp_path, strict=True)
    assert r.returncode == 1, r.stdout
    assert "frobnicator extra is not installed" in r.stdout
    assert "CALIMON_STRICT_SKIPS=1: a required test skipped" in r.stdout
    # a skip inside the test fails it; a skip mark (evaluated at set-up) errors it; xfail stays
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in r.stdout
