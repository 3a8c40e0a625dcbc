"""The report in a real headless Chromium: it renders, its filters work, nothing errors, the
untrusted transcripts do not run, and the Content-Security-Policy is in force.

Needs the `chromium` binary (Debian package `chromium`; .ci/install-chromium.sh); skipped
without it. The screenshot is saved under the test's tmp folder (its path is printed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from calimon.report.chromium import check_page, find_chromium

pytestmark = [pytest.mark.chromium,
              pytest.mark.skipif(find_chromium() is None,
                                 reason="no Chromium binary (apt-get install chromium)")]

VISIBLE = "document.querySelectorAll('.cm-card:not([hidden])').length"


def _set(fid: str, value: str, event: str = "change") -> str:
    return (f"(() => {{ const el = document.getElementById('{fid}'); el.value = '{value}'; "
            f"el.dispatchEvent(new Event('{event}')); return {VISIBLE}; }})()")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from test_report import make_run

    from calimon.report import build_report

    root = tmp_path_factory.mktemp("chromium")
    run = make_run(root, n_pairs=30)  # 62 cards: more than one page of 50
    return build_report(run)


def test_report_renders_in_chromium_without_errors(report, tmp_path):
    from calimon.report.data import gather
    from calimon.report.viewer import outcome

    data = gather(report.html.parent)
    point = next(p for p in data.summary["operating_points"]
                 if p["name"] == report.operating_point)
    expected = {o: sum(outcome(r, point["threshold"]) == o for r in data.rows)
                for o in ("missed", "false-alarm")}
    n = len(data.rows)
    shot = tmp_path / "report.png"
    check = check_page(report.html, screenshot=shot, full_height=2400, expressions={
        "ready": "document.body.getAttribute('data-cm-ready')",
        "figures": "document.querySelectorAll('svg.cm-fig').length",
        "main_width": "document.querySelector('svg.cm-curve').getBoundingClientRect().width",
        "curve_paths": "document.querySelectorAll('svg.cm-curve path.cm-curve-line').length",
        "op_rows": "document.querySelectorAll('table.cm-ops tbody tr').length",
        "cards": "document.querySelectorAll('.cm-card').length",
        "first_page": VISIBLE,
        "more_visible": "!document.getElementById('cm-more').hidden",
        "after_more": f"(() => {{ document.getElementById('cm-more').click(); "
                      f"return {VISIBLE}; }})()",
        "marks": "document.querySelectorAll('.cm-card mark').length",
        "missed": _set("f-outcome", "missed"),
        "false_alarms": _set("f-outcome", "false-alarm"),
        "flag_all_missed": "(() => { document.getElementById('f-outcome').value = 'missed'; "
                           "const t = document.getElementById('f-threshold'); t.value = '0'; "
                           f"t.dispatchEvent(new Event('input')); return {VISIBLE}; }})()",
        "op_is_custom": "document.getElementById('f-op').value",
        "qa_only": "(() => { document.getElementById('f-outcome').value = ''; "
                   "const s = document.getElementById('f-task'); s.value = 'qa'; "
                   f"s.dispatchEvent(new Event('change')); return {VISIBLE}; }})()",
        "pwned": "typeof window.__calimon_pwned",
        "alerts": "typeof window.alert",
        "injected_nodes": "document.querySelectorAll('.cm-card script, .cm-card img, "
                          ".cm-card b').length",
    })
    print(f"screenshot: {check.screenshot}")
    assert check.errors == ()
    v = check.values
    assert v["ready"] == "1"
    assert v["figures"] >= 4 and v["main_width"] > 300 and v["curve_paths"] >= 1
    assert v["op_rows"] == len(data.summary["operating_points"]) + len(
        data.summary["binary_points"])
    assert v["cards"] == n and v["first_page"] == 50
    assert v["more_visible"] is True and v["after_more"] == n
    assert v["marks"] > 0
    assert v["missed"] == expected["missed"] and v["false_alarms"] == expected["false-alarm"]
    assert v["flag_all_missed"] == 0 and v["op_is_custom"] == "custom"
    assert v["qa_only"] == sum(r.task == "qa" for r in data.rows)
    assert v["pwned"] == "undefined" and v["injected_nodes"] == 0
    data_png = shot.read_bytes()
    assert data_png[:8] == b"\x89PNG\r\n\x1a\n" and len(data_png) > 20_000


def test_content_security_policy_blocks_injected_code(report):
    """Were escaping ever to fail, the page's policy still refuses inline code and loads."""
    inject = ("document.body.insertAdjacentHTML('beforeend', "
              "'<img src=\"https://example.invalid/x.png\" onerror=\"window.__calimon_pwned=1\">');"
              "const s = document.createElement('script'); "
              "s.textContent = 'window.__calimon_pwned = 2'; document.body.appendChild(s);")
    check = check_page(report.html, actions=[inject],
                       expressions={"pwned": "typeof window.__calimon_pwned"})
    assert check.values["pwned"] == "undefined"
    blocked = " ".join(e for e in check.errors if "Content Security Policy" in e)
    for what in ("inline event handler", "inline script", "Loading the image"):
        assert what in blocked


def test_errors_of_every_kind_are_caught(tmp_path):
    """The 'no errors' check above is not vacuous: each kind of error is reported."""
    page = tmp_path / "bad.html"
    page.write_text('<!doctype html><p>x</p><img src="missing.png"><script>'
                    'console.error("boom-console"); throw new Error("boom-throw");</script>')
    errors = " | ".join(check_page(page).errors)
    assert "console.error: boom-console" in errors
    assert "uncaught: Error: boom-throw" in errors
    assert "missing.png" in errors


def test_missing_binary_is_a_clear_error(tmp_path):
    from calimon.report.chromium import BrowserError

    page = tmp_path / "p.html"
    page.write_text("<!doctype html><p>x</p>")
    with pytest.raises(BrowserError, match="Chromium"):
        check_page(page, binary=str(Path(tmp_path / "no-such-chromium")), timeout=5)
