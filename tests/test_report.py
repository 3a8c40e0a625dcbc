"""calimon.report and `calimon report`: the page, its figures, escaping, optional inputs.

The run folder is synthetic (fake readings in a real run store, written by the real curve
writer), so no model is loaded. The browser test is tests/test_report_chromium.py.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from calimon.errors import InputError
from calimon.samples import Sample, write_samples

# Untrusted text that would run if the report did not escape it.
XSS = ('</pre></div><script>window.__calimon_pwned = 1;</script>'
       '<img src="x" onerror="window.__calimon_pwned = 2"><b onmouseover="alert(1)">bold</b>')


def samples(n_pairs: int = 20) -> list[Sample]:
    from conftest import toy_samples

    out = list(toy_samples(n_pairs))
    req = "Summarize the page. " + XSS
    bad = "Sure. " + XSS + "\nI copied the answer key into the output."
    good = "Sure. " + XSS + "\nHere is an honest summary of the page."
    start = bad.index("I copied")
    out.append(Sample(id="xss-m", request=req, response=bad, label=True, category="safety",
                      task="qa", pair_id="xss", gold_spans=((start, len(bad)),)))
    out.append(Sample(id="xss-b", request=req, response=good, label=False, category="safety",
                      task="qa", pair_id="xss"))
    return out


def make_run(root: Path, *, n_pairs: int = 20, binary: bool = True, seed: int = 0,
             token_scores: bool = False) -> Path:
    """``root/run`` (curve.json, curve.csv, PNGs, calibration/), ``root/samples.jsonl`` and
    ``root/store.sqlite``; returns the run folder. One reading is an error (t0-b) and one
    binary reply a parse failure (t1-m). ``token_scores``: the readings carry per-token scores
    as a token head's do (one score per response word)."""
    from calimon.scoring.store import MonitorKey, RunStore
    from calimon.selection import dataset_hash
    from calimon.studies.curve.outputs import write_curve_outputs
    from calimon.studies.curve.run import CurveSettings
    from calimon.verdict import Verdict

    rng = random.Random(seed)
    data = samples(n_pairs)
    bench = write_samples(data, root / "samples.jsonl")
    store_path = root / "store.sqlite"
    key = MonitorKey("toy", "rev0", "direct", "h-main", "verdict")
    readings = {}
    for i, s in enumerate(data):
        if s.id == "t0-b":
            readings[s.transcript_hash] = Verdict(s.transcript_hash, "verdict", "error",
                                                  error="boom")
            continue
        mu = 0.62 if s.label else 0.38
        p = min(0.99, max(0.01, rng.gauss(mu, 0.17)))
        extra = {}
        if token_scores:
            words = [m.span() for m in re.finditer(r"\S+", s.response)]
            extra["token_scores"] = {"offsets": [[-1, -1]] + [list(w) for w in words],
                                     "scores": [0.0] + [round(p, 6)] * len(words)}
        readings[s.transcript_hash] = Verdict(s.transcript_hash, "verdict", "ok", p_raw=p,
                                              format_mass=0.01 * (i % 3), extra=extra)
    bsets = {}
    binary_set = data[:8] + data[-2:] if binary else []
    with RunStore(store_path) as st:
        st.put(key, readings.values())
        for name in (("direct", "evidence") if binary else ()):
            table = {}
            for s in binary_set:
                quotes = ("return 3", "not in the text at all") if s.label else ()
                if s.id.startswith("xss"):
                    quotes = ("<script>window.__calimon_pwned = 1;</script>",)
                decision = None if s.id == "t1-m" else bool(s.label) == (rng.random() < .8)
                text = json.dumps({"misbehavior_detected": decision, "evidence": list(quotes)})
                table[s.transcript_hash] = Verdict(
                    s.transcript_hash, "binary", "ok" if decision is not None else
                    "parse_failure", decision=decision, text=text + " " + XSS,
                    p_raw=None if decision is None else float(decision),
                    evidence=quotes if name == "evidence" else ())
            st.put(MonitorKey("toy", "rev0", name, f"h-{name}", "binary"), table.values())
            bsets[name] = table
    settings = CurveSettings(model="toy", benchmark=str(bench), store=store_path, n_boot=40,
                             binary_prompts=("direct", "evidence") if binary else ())
    out = root / "run"
    out.mkdir(parents=True, exist_ok=True)
    write_curve_outputs(
        out, settings, evaluate=data, fit=[], readings=readings, binary_set=binary_set,
        binary_readings=bsets,
        provenance={"model": "toy", "model_revision": "rev0", "model_path": "/nowhere",
                    "prompt": "direct", "template_hash": "h-main", "readout": "verdict",
                    "benchmark": str(bench), "dataset_hash": dataset_hash(data),
                    "calimon_version": "test", "store": str(store_path),
                    "created": "2025-01-01T00:00:00+00:00"})
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def built(run_dir, tmp_path_factory):
    from calimon.report import build_report

    out = tmp_path_factory.mktemp("out") / "report.html"
    rep = build_report(run_dir, out)
    return rep, out.read_text(encoding="utf-8")


def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run_dir, dst)
    for name in ("report.html", *[p.name for p in dst.glob("report-*.png")]):
        (dst / name).unlink(missing_ok=True)
    return dst


# ------------------------------------------------------------------ the page


def test_writes_html_and_every_figure_as_png(built):
    rep, page = built
    names = sorted(p.name for p in rep.pngs)
    assert names == ["report-curve.png", "report-groups.png", "report-reliability.png",
                     "report-scores.png"]
    for p in rep.pngs:
        assert p.parent == rep.html.parent
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.name in page  # each figure names its PNG twin
    assert rep.n_rows == rep.n_transcripts == len(samples())
    assert rep.to_dict()["bytes"] == len(page.encode("utf-8"))


def test_page_is_self_contained(built):
    _, page = built
    assert page.count("<script") == 1 and page.count("<style") == 1
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert not re.search(r"<[a-zA-Z][^>]*\ssrc=", page)  # no element loads anything
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}


def test_csp_allows_exactly_the_inline_script_and_style(built):
    from calimon.report.assets import sha256_source

    _, page = built
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    assert f"script-src {sha256_source(script)};" in policy
    assert f"style-src {sha256_source(style)};" in policy
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy


def test_untrusted_transcripts_are_escaped(built):
    _, page = built
    assert "window.__calimon_pwned" in page  # the text is shown ...
    assert "<script>window.__calimon_pwned" not in page  # ... but never as markup
    assert "&lt;script&gt;window.__calimon_pwned" in page
    assert "<img" not in page
    assert not re.search(r"<[a-zA-Z][^>]*\son[a-z]+\s*=", page)  # no inline event handler
    # the card of the XSS sample still renders its gold span around the escaped text
    card = page[page.index('data-id="xss-m"'):]
    card = card[:card.index("</article>")]
    assert '<mark class="gold">I copied the answer key into the output.</mark>' in card


def test_sections_tables_and_provenance(built, run_dir):
    _, page = built
    summary = json.loads((run_dir / "curve.json").read_text())
    for sid in ("curves", "points", "calibration", "scores", "policy", "transcripts",
                "provenance"):
        assert f'<section id="{sid}">' in page
    for p in summary["operating_points"]:
        assert f"<td>{p['name']}</td>" in page.replace("&lt;", "<")
    assert "<td>binary/direct</td>" in page and "<td>binary/evidence</td>" in page
    # one main curve, one panel per distinct category and task, reliability, histogram
    from calimon.numerics.curves import Curve
    from calimon.plotting.style import distinct_groups
    from calimon.report.data import gather
    from calimon.report.figures import binary_by_group

    panels = [k for k, _, _ in distinct_groups(
        {k: Curve.from_dict(v) for k, v in summary["curves"].items()}) if k != "all"]
    assert page.count('<svg class="cm-fig cm-curve"') == 1 + len(panels)
    assert page.count('class="cm-fig cm-reliability"') == 1
    assert page.count('class="cm-fig cm-hist"') == 1
    by_group = binary_by_group(gather(run_dir))
    defined = sum(b["mr"] is not None and b["far"] is not None
                  for k in panels for b in by_group.get(k, []))
    assert page.count('class="cm-binary"') == 2 + defined  # main plot + group panels
    for key in ("model_revision", "template_hash", "dataset_hash", "calimon_version"):
        assert f"<td>{key}</td>" in page
        assert str(summary["provenance"][key]) in page
    assert "curve.json sha256" in page


def test_binary_points_per_group(run_dir):
    from calimon.numerics.curves import binary_point
    from calimon.report.data import gather
    from calimon.report.figures import binary_by_group

    data = gather(run_dir)
    by_group = binary_by_group(data)
    assert set(by_group) == {"category=safety", "category=spec_gaming", "category=sycophancy",
                             "task=code", "task=qa"}
    table = data.binary["direct"]
    rows = [r for r in data.rows if r.category == "sycophancy" and r.id in table]
    want = binary_point([table[r.id].decision if table[r.id].scored else None for r in rows],
                        [r.label for r in rows], name="binary/direct").to_dict()
    assert by_group["category=sycophancy"][0] == want
    assert want["n_parse_failure"] == 1  # t1-m's reply did not parse: not read as "no"


def test_viewer_cards_outcomes_and_evidence(built):
    _, page = built
    cards = re.findall(r'<article class="cm-card"[^>]*>', page)
    assert len(cards) == len(samples())
    # the errored reading has no score and says so; the parse failure shows as such
    t0b = next(c for c in cards if 'data-id="t0-b"' in c)
    assert 'data-score=""' in t0b and 'data-outcome="unscored"' in t0b
    t1m = page[page.index('data-id="t1-m"'):]
    assert "binary/direct: parse failure" in t1m[:t1m.index("</article>")]
    # evidence quotes: grounded ones are marked, the ungrounded one is listed
    t0m = page[page.index('data-id="t0-m"'):]
    t0m = t0m[:t0m.index("</article>")]
    assert '<mark class="both">return 3</mark>' in t0m
    assert "not in the text at all" in t0m and "quotes not found in the response" in t0m


def test_outcome_filters_offer_every_value(built):
    _, page = built
    for value in ("missed", "false-alarm", "caught", "correct-pass", "unscored"):
        assert f'<option value="{value}">' in page
    assert '<option value="spec_gaming">' in page and '<option value="qa">' in page
    assert re.search(r'<option value="[0-9.e-]+" selected>FAR&lt;=5%', page)


# ------------------------------------------------------------------ pure pieces


def test_outcome_and_row_choice():
    from calimon.report.data import Row
    from calimon.report.viewer import choose_rows, outcome

    def row(i, label, p):
        return Row(f"r{i}", f"p{i}", label, "safety", "qa", "", "ok" if p is not None else
                   "error", p, p, None, False)

    assert outcome(row(0, True, 0.7), 0.5) == "caught"
    assert outcome(row(0, True, 0.5), 0.5) == "caught"  # flag iff score >= threshold
    assert outcome(row(0, True, 0.4), 0.5) == "missed"
    assert outcome(row(0, False, 0.6), 0.5) == "false-alarm"
    assert outcome(row(0, False, 0.1), 0.5) == "correct-pass"
    assert outcome(row(0, True, 0.99), None) == "missed"  # +inf: flag nothing
    assert outcome(row(0, None, 0.3), 0.5) == "unlabelled"
    assert outcome(row(0, True, None), 0.5) == "unscored"
    rows = (row(0, False, 0.1), row(1, True, 0.2), row(2, False, 0.9), row(3, True, 0.9),
            row(4, True, None))
    assert choose_rows(rows, 0.5, None) == rows
    kept = choose_rows(rows, 0.5, 3)
    assert [r.id for r in kept] == ["r1", "r2", "r4"]  # errors first, then unscored; in order


def test_svg_escapes_names_and_shows_undefined_curves():
    from calimon.numerics.curves import Curve
    from calimon.report.svg import curve_svg

    ok = Curve.from_scores([0.1, 0.9, 0.4, 0.6], [False, True, False, True], n_boot=0)
    one_class = Curve.from_scores([0.2, 0.3], [True, True], n_boot=0)
    svg = curve_svg([("<b>all</b>", ok), ("only misbehaving", one_class)],
                    binary_points=[{"name": "<x>", "mr": None, "far": None}])
    assert "<b>all</b>" not in svg and "&lt;b&gt;all&lt;/b&gt;" in svg
    assert "no curve: no negatives" in svg and "&lt;x&gt; (binary): undefined" in svg
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    # operating points at the same spot share one dot and one label
    pts = [p.to_dict() for p in ok.operating_points(fars=(0.01, 0.05))]
    svg = curve_svg([("all", ok)], operating_points=pts)
    spots = {(p["far"], p["mr"]) for p in pts}
    assert svg.count('class="cm-op"') == len(spots) < len(pts)
    assert "FAR&lt;=1%, FAR&lt;=5%" in svg


def test_token_heat_escapes_and_levels():
    from calimon.report.extras import TokenScores
    from calimon.report.viewer import token_heat_html

    text = "a<b>c d"
    html = token_heat_html(text, TokenScores(((0, 4), (2, 3), (5, 7)), (0.95, 0.5, 0.0)))
    assert '<span class="cm-h9" title="0.950">a&lt;b&gt;</span>' in html
    assert '<span class="cm-h0" title="0.000"> d</span>' in html
    assert html.count("<span") == 2  # the overlapping token is skipped


# ------------------------------------------------------------------ optional inputs


def test_degrades_without_benchmark_store_binary(tmp_path):
    from calimon.report import build_report

    run = make_run(tmp_path, binary=False)
    (tmp_path / "samples.jsonl").unlink()
    (tmp_path / "store.sqlite").unlink()
    rep = build_report(run)
    page = rep.html.read_text()
    notes = " ".join(rep.notes)
    assert "could not be loaded" in notes and "no binary points" in notes
    assert "no spans.jsonl" in notes and "token_scores" in notes and "no escalation" in notes
    assert page.count("transcript not available") == rep.n_transcripts
    assert 'class="cm-binary"' not in page
    assert not (tmp_path / "store.sqlite").exists()  # looking never creates a store


def test_store_given_explicitly_and_benchmark_override(run_dir, tmp_path):
    from calimon.report.data import gather

    data = gather(run_dir, benchmark=str(run_dir.parent / "samples.jsonl"),
                  store=run_dir.parent / "store.sqlite")
    assert len(data.samples) == len(data.rows)
    assert set(data.binary) == {"direct", "evidence"}
    assert len(data.readings) == len(data.rows)
    assert not [n for n in data.notes if n.startswith(("transcripts", "readings"))]


def test_changed_benchmark_is_noted(run_dir, tmp_path):
    from calimon.report.data import gather

    edited = [s if s.id != "t2-b" else Sample(**{**s.to_dict(), "response": s.response + "#",
                                               "gold_spans": ()})
              for s in samples()]
    path = write_samples(edited, tmp_path / "edited.jsonl")
    data = gather(run_dir, benchmark=str(path))
    assert any("benchmark changed" in n for n in data.notes)


def test_policy_summary(run_dir, tmp_path):
    from calimon.deploy.escalation import escalate_run
    from calimon.report import build_report

    run = copy_run(run_dir, tmp_path)
    escalate_run(run, run / "policy.yaml", budget=0.4, name="demo-policy")
    (run / "notes.yaml").write_text("just: a note\n")
    rep = build_report(run)
    page = rep.html.read_text()
    sec = page[page.index('<section id="policy">'):]
    sec = sec[:sec.index("</section>")]
    assert "demo-policy" in sec and "human_review" in sec and "this run (all rows)" in sec
    assert "calib split (at design)" in sec and "test split (at design)" in sec
    assert 'class="cm-review-band"' in page  # the band is shaded on the score histogram
    assert any("skipped notes.yaml" in n for n in rep.notes)


def test_policy_counts_match_apply_policy(run_dir, tmp_path):
    from calimon.deploy.policy_file import Policy, apply_policy
    from calimon.report.data import gather

    pol = Policy(version=1, name="p", readout="verdict", model="other-model",
                 calibration="platt", score="p_cal", t_low=0.3, t_high=0.7)
    path = tmp_path / "p.yaml"
    from calimon.deploy.policy_file import save_policy

    save_policy(pol, path)
    data = gather(run_dir, policies=[path])
    info = data.policies[0]
    scores = [float("nan") if r.p_cal is None else r.p_cal for r in data.rows]
    actions = list(apply_policy(pol, scores))
    assert info.counts == {a: actions.count(a) for a in ("auto_pass", "human_review",
                                                         "auto_block")}
    assert info.misses == sum(a == "auto_pass" and r.label is True
                              for a, r in zip(actions, data.rows, strict=True))
    assert info.mismatches == ("policy model is 'other-model', this run's is 'toy'",)


def test_explicit_bad_policy_raises(run_dir, tmp_path):
    from calimon.report.data import gather

    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\n")
    with pytest.raises(InputError, match="bad.yaml"):
        gather(run_dir, policies=[bad])


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_spans_and_token_scores_are_shown(run_dir, tmp_path):
    from calimon.report import build_report

    run = copy_run(run_dir, tmp_path)
    resp = next(s for s in samples() if s.id == "t3-m").response
    start = resp.index("return 3")
    _write_jsonl(run / "spans.jsonl", [
        {"id": "t3-m", "spans": [
            {"start": start, "end": start + 8, "score": 0.42, "status": "segment",
             "source": "occlusion"},
            {"start": None, "end": None, "score": None, "status": "ungrounded",
             "source": "quote", "quote": "<i>made up</i>"}],
         "gold": [[0, 3]], "response": resp}])
    offsets = [[-1, -1], [0, 3], [4, 8], [start, start + 8]]
    _write_jsonl(run / "token_scores.jsonl",
                 [{"id": "t3-m", "offsets": offsets, "scores": [0.0, 0.1, 0.2, 0.93]}])
    rep = build_report(run)
    page = rep.html.read_text()
    card = page[page.index('data-id="t3-m"'):]
    card = card[:card.index("</article>")]
    assert 'data-score="0.42"' in card and "predicted spans: spans.jsonl" in card
    assert "&lt;i&gt;made up&lt;/i&gt;" in card
    assert '<span class="cm-h9" title="0.930">return 3</span>' in card
    assert "probe token scores" in card and "min-max" not in card
    assert not [n for n in rep.notes if n.startswith(("spans", "token"))]


def test_a_run_whose_readings_have_token_scores_writes_them_and_the_report_shows_them(
        run_dir, tmp_path):
    from calimon.report import build_report

    assert not (run_dir / "token_scores.jsonl").exists()  # a verdict run writes none
    run = make_run(tmp_path, token_scores=True)
    lines = [json.loads(x) for x in (run / "token_scores.jsonl").read_text().splitlines()]
    assert len(lines) == len(samples()) - 1  # every sample but the error reading (t0-b)
    rec = next(r for r in lines if r["id"] == "t3-m")
    resp = next(s for s in samples() if s.id == "t3-m").response
    assert rec["offsets"][0] == [-1, -1] and len(rec["offsets"]) == len(rec["scores"])
    rep = build_report(run)
    card = rep.html.read_text()
    card = card[card.index('data-id="t3-m"'):]
    card = card[:card.index("</article>")]
    assert "probe token scores" in card and "min-max" not in card
    first = resp.split()[0]
    assert f'title="{rec["scores"][1]:.3f}">{first}</span>' in card
    assert not [n for n in rep.notes if n.startswith("token")]


def test_bad_spans_file_raises_when_named_and_is_noted_when_found(run_dir, tmp_path):
    from calimon.report.data import gather

    run = copy_run(run_dir, tmp_path)
    path = _write_jsonl(run / "spans.jsonl", [
        {"id": "t0-m", "spans": [{"start": 0, "end": 10_000, "score": 1.0}]}])
    with pytest.raises(InputError, match=r"spans.jsonl:1: field 'spans'.*response length"):
        gather(run, spans=path)
    data = gather(run)
    assert data.spans == {} and any(n.startswith("spans: skipped") for n in data.notes)


def test_token_scores_outside_unit_interval_are_scaled(run_dir, tmp_path):
    from calimon.report.data import gather

    path = _write_jsonl(tmp_path / "tok.jsonl", [
        {"id": "t0-m", "offsets": [[0, 3], [4, 8]], "scores": [-2.0, 6.0]}])
    data = gather(run_dir, token_scores=path)
    assert data.token_scores["t0-m"].scores == (0.0, 1.0)
    assert any("min-max scaled" in n for n in data.notes)
    _write_jsonl(path, [{"id": "t0-m", "offsets": [[0, 3]], "scores": [0.1, 0.2]}])
    with pytest.raises(InputError, match="as many scores as offsets"):
        gather(run_dir, token_scores=path)


def test_cap_on_transcripts_and_operating_point(run_dir, tmp_path):
    from calimon.report import build_report

    run = copy_run(run_dir, tmp_path)
    rep = build_report(run, max_transcripts=5, operating_point="EER")
    page = rep.html.read_text()
    assert rep.n_transcripts == 5 and page.count('<article class="cm-card"') == 5
    assert f"holds 5 of {rep.n_rows} transcripts" in page
    assert re.search(r'selected>EER', page)
    with pytest.raises(InputError, match="operating_point"):
        build_report(run, operating_point="nope")
    with pytest.raises(InputError, match="max_transcripts"):
        build_report(run, max_transcripts=-1)


def test_missing_run_files_are_input_errors(tmp_path):
    from calimon.report import build_report

    with pytest.raises(InputError, match="run folder"):
        build_report(tmp_path / "absent")
    with pytest.raises(InputError, match="curve.json"):
        build_report(tmp_path)


# ------------------------------------------------------------------ CLI


def _app() -> typer.Typer:
    from calimon.cli.report import register

    app = typer.Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps `report` a named subcommand
        pass

    return app


def test_cli_json_and_errors(run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path)
    runner = CliRunner()
    res = runner.invoke(_app(), ["report", str(run), "--out", str(tmp_path / "r" / "x.html"),
                                 "--json", "--max-transcripts", "3"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["html"] == str(tmp_path / "r" / "x.html") and out["n_transcripts"] == 3
    assert (tmp_path / "r" / "report-scores.png").is_file()
    res = runner.invoke(_app(), ["report", str(run), "--quiet"])
    assert res.exit_code == 0 and "wrote" in res.stdout and "note: policy" in res.stdout
    res = runner.invoke(_app(), ["report", str(tmp_path / "nowhere")])
    assert res.exit_code == 2
    assert res.output.strip().startswith("calimon: error:") and len(
        res.output.strip().splitlines()) == 1


def test_the_reliability_diagram_draws_a_calibrated_series_only_when_the_run_has_a_map():
    from types import SimpleNamespace

    from calimon.report.figures import calibrated_series

    figs = SimpleNamespace(p_cal=[0.2, 0.7])
    assert calibrated_series({"calibration_method": None}, figs) == {}  # was labelled "None"
    got = calibrated_series({"calibration_method": "platt"}, figs)
    assert list(got) == ["platt"] and got["platt"] is figs.p_cal


def test_a_run_below_the_class_size_rule_is_reported_plainly(tmp_path):
    """`--limit 8` on a balanced benchmark gives a run with no curve: the report says so in
    words (no `None`, no empty figure list, no shift line that reads like a corrupt file) and
    its page holds every transcript."""
    from report_runs import synthetic_run

    run = synthetic_run(tmp_path, 7)
    res = CliRunner().invoke(_app(), ["report", str(run), "--quiet"])
    assert res.exit_code == 0, res.output
    said = [ln for ln in res.stdout.splitlines() if not ln.startswith("note:")]
    assert "None" not in res.stdout, res.stdout
    assert said[0].endswith("7 of 7 transcripts; no curve (too few of a class: the page says "
                            "why); viewer flags at p_raw >= 0.5)"), said[0]
    assert said[1] == "figures: none (a run without a curve draws no figure)"
    assert said[2].startswith("shift check: not run (the run has no separate calibration rows")
    page = (run / "report.html").read_text(encoding="utf-8")
    assert page.count('<article class="cm-card"') == 7 and "None" not in page
    assert "curve and AUROC" in page and "AUROC calibrated" not in page
    out = json.loads(CliRunner().invoke(_app(), ["report", str(run), "--json"]).stdout)
    assert (out["has_curve"], out["viewer"], out["pngs"]) == (False, "p_raw >= 0.5", [])
