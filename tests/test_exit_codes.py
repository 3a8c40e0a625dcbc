"""One exit-code scheme (`calimon.errors.ExitCode`), the same in the README's "Exit codes"
table, in docs/reliability.md and on every error class."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from calimon import errors
from calimon.cli import app
from calimon.errors import ExitCode

ROOT = Path(__file__).resolve().parents[1]


def _table_codes(text: str) -> list[int]:
    """The first column of the markdown table that starts with ``| code | meaning``."""
    table = text.split("| code | meaning", 1)[1].split("\n\n", 1)[0]
    return [int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)]


def test_the_readme_and_the_reliability_page_list_every_code_once():
    want = sorted(int(c) for c in ExitCode)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _table_codes(readme.split("### Exit codes", 1)[1]) == want
    assert _table_codes((ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")) == want


def test_each_kind_of_error_carries_its_code():
    from calimon.deploy.policies import InfeasiblePolicyError
    from calimon.scoring.backends.offline import OfflineReadingMissing

    assert {cls: cls.exit_code for cls in (
        errors.CalimonError, errors.BackendError, errors.InvertedMapError, errors.InputError,
        errors.ConfigError, OfflineReadingMissing, InfeasiblePolicyError,
        errors.ModelNotAvailableError, errors.MissingExtraError, errors.DataSourceError,
        errors.ServiceUnreachable)} == {
        errors.CalimonError: 1, errors.BackendError: 1, errors.InvertedMapError: 1,
        errors.InputError: 2, errors.ConfigError: 2, OfflineReadingMissing: 2,
        InfeasiblePolicyError: 3, errors.ModelNotAvailableError: 4,
        errors.MissingExtraError: 4, errors.DataSourceError: 4, errors.ServiceUnreachable: 5}


def test_usage_errors_share_the_code_of_bad_input(tmp_path):
    for args in (["curve", "--no-such-option"], ["curve", "--n-boot", "many"],
                 ["thresholds", str(tmp_path), "--far", "5"]):
        assert CliRunner().invoke(app, args).exit_code == ExitCode.USAGE, args


def test_a_review_server_that_does_not_answer_exits_5(monkeypatch):
    from test_offline import closed_port

    monkeypatch.setenv("CALIMON_API_KEY", "k" * 20)
    r = CliRunner().invoke(app, ["recertify", "--serve", f"http://127.0.0.1:{closed_port()}"])
    assert r.exit_code == ExitCode.UNREACHABLE, r.output
    assert "did not answer" in r.output
