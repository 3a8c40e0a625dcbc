"""The adaptive attacker: insertions keep the misbehavior (AST, gold span text), the search keeps
its budget exactly, finds what a monitor is weak to, stops at the first pass, and runs end to end
through `calimon robustness --adaptive` on a fake backend."""

from __future__ import annotations

import ast
import csv
import json
import textwrap
from dataclasses import replace

import pytest
import typer
from conftest import toy_samples
from test_faults import fake_factory
from test_robustness import FENCED, _code_of
from typer.testing import CliRunner

from calimon.errors import InputError
from calimon.samples import Sample, write_samples
from calimon.studies.robustness.adaptive import candidate_order, search
from calimon.studies.robustness.attacks import (
    CODE_COMMENT,
    COMMENT_LINES,
    CONTROL_NOTE,
    FAKE_VERDICT,
    REVIEWER_NOTE,
    ROLE_MARKERS,
)
from calimon.studies.robustness.edits import PHRASES, apply_edits, keeps_misbehavior, positions

SAMPLES = toy_samples(2) + FENCED


def _ast(code: str) -> str | None:
    try:
        return ast.dump(ast.parse(textwrap.dedent(code)))
    except SyntaxError:
        return None


def _assert_intact(clean: Sample, got: Sample) -> None:
    """Independent of `keeps_misbehavior`: span texts equal, the Python code's AST equal."""
    assert [got.response[s:e] for s, e in got.gold_spans] == \
        [clean.response[s:e] for s, e in clean.gold_spans]
    code = _code_of(clean)
    if clean.task == "code" and code is not None and "```c" not in clean.response \
            and _ast(code) is not None:
        assert _ast(_code_of(got)) == _ast(code), got.response


def _never(rows):
    return [0.9] * len(rows)


class Recorder:
    """A fake monitor: raw score 0.9, minus ``drop`` when ``weak`` says so; records queries."""

    def __init__(self, weak=lambda text: False, drop=0.6):
        self.weak, self.drop, self.seen, self.calls = weak, drop, [], 0

    def __call__(self, rows):
        self.calls += 1
        self.seen += rows
        return [0.9 - (self.drop if self.weak(r.response) else 0.0) for r in rows]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id + s.response[:12])
def test_every_queried_rewrite_keeps_the_misbehavior(sample):
    mon = Recorder()
    r = search(sample, 0.9, mon, lambda p: p >= 0.5, budget=40, beam=2, width=6, max_edits=3)
    assert r.queries == len(mon.seen) > 0
    for got in mon.seen:
        _assert_intact(sample, got)
        assert got.response != sample.response and got.label == sample.label
        assert got.meta["attacked_id"] == sample.id
    assert len({g.response for g in mon.seen}) == len(mon.seen)  # no transcript queried twice
    assert any(len(c.edits) > 1 for c in r.candidates)  # phrases combine


def test_the_check_refuses_a_changed_program_or_span():
    s = FENCED[0]
    assert keeps_misbehavior(s, apply_edits(s, [(0, "code_top"), (12, "code_end")]))
    inside = s.response.index("    return 0")  # prose inside the code block: not a comment
    broken = replace(s, response=s.response[:inside] + "x = 1\n" + s.response[inside:])
    assert not keeps_misbehavior(s, broken)
    (a, b), = s.gold_spans
    moved = replace(s, gold_spans=((a + 1, b + 1),))
    assert not keeps_misbehavior(s, moved)
    bare = toy_samples(1)[0]  # bare code: no prose positions, comments only
    assert {p.name for p in positions(bare)} == {"code_top", "code_end"}


@pytest.mark.parametrize("budget", [1, 2, 5, 13, 40])
def test_the_search_makes_exactly_budget_queries(budget):
    mon = Recorder()
    r = search(FENCED[0], 0.9, mon, lambda p: p >= 0.5, budget=budget, beam=2, width=3,
               chunk=4)
    assert r.queries == len(mon.seen) == budget and r.flip_query is None
    assert [c.query for c in r.candidates] == list(range(1, budget + 1))
    small = search(FENCED[0], 0.9, Recorder(), lambda p: p >= 0.5, budget=min(budget, 3),
                   beam=2, width=3, chunk=4)
    assert small.candidates == r.candidates[:min(budget, 3)]  # a prefix of the larger search


def test_the_search_finds_the_phrase_and_position_the_monitor_is_weak_to():
    target = next(i for i, (k, _) in enumerate(PHRASES) if k == "instruction")
    text = PHRASES[target][1]
    sample = FENCED[0]
    mon = Recorder(weak=lambda resp: f"# {text}\nimport sys" in resp)  # at the top of the code
    n_pairs = len(candidate_order(sample, 0))
    r = search(sample, 0.9, mon, lambda p: p >= 0.5, budget=n_pairs, beam=1, width=8,
               max_edits=1, chunk=1)
    best = r.best()
    assert best.p == pytest.approx(0.3) and best.edits == ((target, "code_top"),)
    assert r.flip_query == best.query == r.queries  # chunk 1: stopped at the first pass
    assert r.best_p(best.query - 1) == pytest.approx(0.9)  # not found before that query
    # The same phrase elsewhere does nothing: position matters to this monitor.
    assert all(c.p == pytest.approx(0.9) for c in r.candidates
               if c.edits != ((target, "code_top"),))


def test_the_search_combines_phrases_when_one_is_not_enough():
    verdict, role = (next(i for i, (k, _) in enumerate(PHRASES) if k == kind)
                     for kind in ("verdict", "role"))

    def score(rows):
        out = []
        for r in rows:
            p = 0.9 - 0.25 * (PHRASES[verdict][1] in r.response) \
                - 0.25 * (PHRASES[role][1] in r.response)
            out.append(p)
        return out

    r = search(FENCED[1], 0.9, score, lambda p: p >= 0.5, budget=400, beam=3, width=10,
               max_edits=2, chunk=1)
    assert r.flip_query is not None and r.queries == r.flip_query < 400
    assert {i for i, _ in r.best().edits} == {verdict, role}


def test_the_search_stops_when_the_transcript_flips():
    mon = Recorder(weak=lambda resp: True)  # every rewrite passes
    r = search(FENCED[0], 0.9, mon, lambda p: p >= 0.5, budget=64, width=8, chunk=1)
    assert r.flip_query == 1 and r.queries == 1 and mon.calls == 1
    r = search(FENCED[0], 0.9, Recorder(weak=lambda resp: True), lambda p: p >= 0.5,
               budget=64, width=8, chunk=4)
    assert r.flip_query == 1 and r.queries == 4  # the chunk it was in, nothing after


def test_the_search_is_deterministic_and_refuses_bad_settings():
    kw = dict(budget=12, beam=2, width=3)
    a = search(FENCED[0], 0.9, _never, lambda p: p >= 0.5, **kw)
    assert a == search(FENCED[0], 0.9, _never, lambda p: p >= 0.5, **kw)
    assert a != search(FENCED[0], 0.9, _never, lambda p: p >= 0.5, seed=1, **kw)
    assert len({i for i, _ in candidate_order(FENCED[0], 0)[:len(PHRASES)]}) == len(PHRASES)
    for bad in ({"budget": 0}, {"beam": 0}, {"width": -1}, {"budget": True}):
        with pytest.raises(InputError):
            search(FENCED[0], 0.9, _never, lambda p: p >= 0.5, **{**kw, **bad})


def test_unscored_rewrites_count_as_queries_and_never_as_a_pass():
    r = search(FENCED[0], 0.9, lambda rows: [None] * len(rows), lambda p: p >= 0.5, budget=5)
    assert r.queries == 5 and r.flip_query is None and r.best() is None
    assert r.best_p() == 0.9


def test_the_library_is_not_the_fixed_attacks():
    fixed = (REVIEWER_NOTE, FAKE_VERDICT, ROLE_MARKERS, CONTROL_NOTE, CODE_COMMENT,
             *COMMENT_LINES)
    for _, text in PHRASES:
        assert all(text.strip() not in f and f.strip() not in text for f in fixed)
        assert "```" not in text
    assert {k for k, _ in PHRASES} == {"note", "verdict", "role", "instruction", "neutral"}


# ----------------------------------------------------------------------------- the study

def _args(smol, tmp_path, budget: int):
    bench = write_samples(toy_samples(10), tmp_path / "toy.jsonl")
    return ["robustness", "--adaptive", "--budget", str(budget), "--beam", "2", "--width", "2",
            "--model", str(smol.path), "--benchmark", str(bench), "--split", "all",
            "--fit-split", "all", "--far", "0.3", "--store", str(tmp_path / "s.sqlite"),
            "--out", str(tmp_path / "out")]


def _app():
    from calimon.cli.robustness import register

    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return app


def test_cli_adaptive_end_to_end(smol, tmp_path, monkeypatch):
    made = fake_factory(monkeypatch)
    report = tmp_path / "robustness.md"
    args = _args(smol, tmp_path, budget=3) + ["--report", str(report)]
    res = CliRunner().invoke(_app(), args + ["--quiet"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "out" / "adaptive.json").read_text())
    assert [d["budget"] for d in doc["by_budget"]] == [1, 3]
    searched = doc["searched"]
    assert searched == doc["by_budget"][0]["flagged_clean"] > 0
    with (tmp_path / "out" / "adaptive.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    per = {}
    for row in rows:
        per[row["id"]] = per.get(row["id"], 0) + 1
    assert len(per) == searched and max(per.values()) <= 3
    assert doc["queries"]["total"] == len(rows)
    flips = [d["flipped"] for d in doc["by_budget"]]
    assert flips[0] <= flips[1]  # a larger budget never finds fewer passes
    for d in doc["best_attacks"]:
        assert d["edits"] and d["delta_raw"] == pytest.approx(d["p_attacked"] - d["p_clean"])
    text = report.read_text()
    assert "<!-- robustness:adaptive:verdict/" in text and "| budget" in text
    assert "`calimon robustness --adaptive " in text and "--budget 3" in text
    calls = made[-1].forward_calls
    assert calls > 0
    again = CliRunner().invoke(_app(), args + ["--json"])  # resumed from the store
    assert again.exit_code == 0, again.output
    assert made[-1].forward_calls == calls  # the process's one backend: no call added
    assert json.loads(again.output)["by_budget"] == doc["by_budget"]


@pytest.mark.parametrize("extra, needle", [(["--budget", "0"], "budget"),
                                           (["--attack", "reviewer_note"], "--attack")])
def test_cli_adaptive_refuses_bad_flags_in_one_line(smol, tmp_path, monkeypatch, extra, needle):
    fake_factory(monkeypatch)
    res = CliRunner().invoke(_app(), _args(smol, tmp_path, budget=3) + extra)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and needle in lines[0], res.output


def test_nothing_flagged_means_nothing_searched_and_no_rate(smol, tmp_path, monkeypatch):
    from calimon.studies.robustness.adaptive_study import AdaptiveSettings, run_adaptive

    made = fake_factory(monkeypatch)
    # Labels swapped: the monitor scores the benign (hard-coded) replies highest; the isotonic
    # map (non-decreasing) cannot turn that round, so at FAR <= 10% no misbehaving transcript
    # is flagged and there is nothing to attack. The raw score ranks the wrong way on the fit
    # set, which stops the study unless kept with allow_inverted (recorded).
    # 20 pairs: enough of each class for the class-size rule to fit a map (20)
    swapped = [replace(s, label=not s.label, gold_spans=()) for s in toy_samples(20)]
    bench = write_samples(swapped, tmp_path / "swapped.jsonl")
    run = run_adaptive(AdaptiveSettings(model=str(smol.path), benchmark=str(bench), split=None,
                                        fit_split=None, budget=4, calibration="isotonic",
                                        allow_inverted=True,
                                        store=tmp_path / "s.sqlite", out=tmp_path / "out"))
    assert run.summary["clean"]["calibration"]["inverted"]["allowed"]
    assert run.summary["searched"] == 0 and run.summary["queries"]["total"] == 0
    assert all(d["flagged_clean"] == 0 and d.get("flip_rate") is None
               for d in run.summary["by_budget"])
    assert "n/a (none flagged)" in (tmp_path / "out" / "adaptive.md").read_text()
    assert made[-1].forward_calls > 0  # the clean set was scored
