"""Evidence in a reader's units: segments, their scores and ranking, the precision map (JSON),
the segment study's figures, and the ranked evidence every consumer shows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calimon.calibration.segment_precision import (
    fit_precision_map,
    load_precision_map,
    precision_map_path,
    reliability,
)
from calimon.data.trajectory import Part, render_parts
from calimon.errors import InputError
from calimon.integrations.assessment import Assessment, cite, ranked_spans
from calimon.numerics.reader_segments import (
    ScoredUnit,
    rank_units,
    reader_units,
    score_units,
    spans_to_units,
    with_precision,
)
from calimon.samples import Sample

CODE = "def f(x):\n    y = x + 1\n    return y\n"
PROSE = ("You are right. I never ran the tests, e.g. the slow ones. "
         "Everything passes!\nDone.")


def texts(text, units):
    return [text[a:b] for a, b in units]


def test_code_units_are_lines_and_prose_units_are_sentences():
    assert texts(CODE, reader_units(CODE, "code")) == ["def f(x):", "y = x + 1", "return y"]
    assert texts(PROSE, reader_units(PROSE, "qa")) == [
        "You are right.", "I never ran the tests, e.g. the slow ones.", "Everything passes!",
        "Done."]


def test_a_long_sentence_is_cut_into_clauses_at_punctuation():
    s = ("The function returns the cached value from the first call, which is stale after "
         "an update; the caller never sees the new value, and the tests only check the first "
         "call so they pass anyway.")
    got = texts(s, reader_units(s, "qa"))
    assert len(got) > 1 and all(len(x) >= 40 for x in got)
    assert " ".join(got) == s  # clauses tile the sentence


def test_a_trajectory_splits_tool_calls_into_arguments_and_results_into_lines():
    text, recs = render_parts([
        Part(0, "assistant", "text", "I will check. Then fix it."),
        Part(1, "assistant", "tool_call", "cmd: rm -rf tests\ncwd: /repo", tool="bash"),
        Part(2, "tool", "tool_result", "removed 3 files\nok", tool="bash")])
    got = texts(text, reader_units(text, "qa", recs))
    assert got == ["I will check.", "Then fix it.", "cmd: rm -rf tests", "cwd: /repo",
                   "removed 3 files", "ok"]  # headers are never units


def test_a_segment_scores_its_strongest_token_and_ranks_strongest_first():
    units = reader_units(CODE, "code")
    offsets = [(0, 3), (4, 9), (14, 15), (16, 17), (18, 23), (24, 27), (28, 34), (34, 36),
               (0, 0)]
    scores = [0.1, 0.2, 0.3, 0.9, 0.1, 0.7, 0.4, 0.5, 0.99]  # the empty marker token is ignored
    got = score_units(units, offsets, scores)  # (24, 27) is indentation: no unit holds it
    assert [u.score for u in got] == [0.2, 0.9, 0.5]
    assert texts(CODE, [(u.start, u.end) for u in rank_units(got)]) == [
        "y = x + 1", "return y", "def f(x):"]
    assert len(rank_units(got, 2)) == 2


def test_spans_without_scores_rank_by_their_order():
    units = reader_units(CODE, "code")

    class Q:
        def __init__(self, a, b):
            self.start, self.end, self.score = a, b, None

    got = rank_units(spans_to_units(units, [Q(30, 36), Q(0, 3)]))
    assert texts(CODE, [(u.start, u.end) for u in got])[:2] == ["return y", "def f(x):"]


def test_bad_token_scores_are_refused_naming_the_field():
    with pytest.raises(InputError, match="scores"):
        score_units([(0, 3)], [(0, 3)], [0.1, 0.2])
    with pytest.raises(InputError, match="NaN"):
        score_units([(0, 3)], [(0, 3)], [float("nan")])


def test_the_precision_map_is_json_beside_the_head_and_round_trips(tmp_path):
    card = tmp_path / "amb-open-token.card.yaml"
    where = precision_map_path(card)
    assert where.name == "amb-open-token.segments.json"
    rng = np.random.default_rng(0)
    s = rng.uniform(size=400)
    y = rng.uniform(size=400) < s  # P(hit | score) = score
    stored = fit_precision_map(s, y, [str(i) for i in range(400)], where,
                               extra={"token_head": "amb-open-token"})
    doc = json.loads(where.read_text())  # plain JSON, no pickle
    assert doc["extra"]["kind"] == "segment-precision" and doc["method"] == "isotonic"
    again = load_precision_map(where)
    grid = np.linspace(0, 1, 11)
    assert np.allclose(again.predict(grid), stored.predict(grid))
    assert reliability(again.predict(s), y)["ece"] < 0.05


def test_another_kind_of_map_is_refused_naming_the_file(tmp_path):
    from calimon.calibration.io import fit_set_hash, save_map
    from calimon.calibration.maps import make_calibrator

    p, y = np.array([0.1, 0.9, 0.2, 0.8]), np.array([0, 1, 0, 1])
    path = save_map(make_calibrator("platt").fit(p, y), tmp_path / "m.json",
                    fit_hash=fit_set_hash(p, y, list("abcd")), metrics={})
    with pytest.raises(InputError, match="segment precision map") as got:
        load_precision_map(path)
    assert str(path) in str(got.value) and got.value.field == "extra"


def _sample(response, gold, task="code"):
    return Sample(id="s1", request="r", response=response, label=True, category="sycophancy",
                  task=task, pair_id="p1", gold_spans=gold, source="mbpp", split="test")


def test_the_study_measures_hit_precision_and_floors():
    from calimon.studies.spans.segment_study import judge, per_row, segment_row

    gold = [(CODE.index("return"), CODE.index("return") + 8)]
    offsets = [(0, 3), (14, 15), (30, 36)]
    row = segment_row(_sample(CODE, gold), offsets, [0.1, 0.2, 0.9], [(30, 36, 0.9)])
    got = per_row(row)
    assert got["seg_hit1"] == 1.0 and got["seg_prec1"] == 1.0
    assert got["seg_hit1_floor"] == pytest.approx(1 / 3)
    assert got["tok_hit1"] == 1.0
    out = judge([row, row], lambda s: np.asarray(s))
    assert out["overall"]["n"] == 2 and out["overall"]["seg_hit1"]["mean"] == 1.0
    assert out["overall"]["seg_hit1_minus_floor"]["mean"] == pytest.approx(2 / 3)
    assert set(out["by_category"]) == {"sycophancy"} and out["reliability"]["n"] == 6


def test_evidence_is_ranked_strongest_first_with_its_precision():
    spans = ({"start": 0, "end": 3, "score": 0.2, "text": "def", "messages": []},
             {"start": 30, "end": 36, "score": 0.9, "text": "return",
              "messages": [{"index": 3}]})
    assert [s["text"] for s in ranked_spans(spans)] == ["return", "def"]
    ranked = tuple({**s, "rank": k, "precision": p} for k, (s, p) in
                   enumerate(zip(ranked_spans(spans), (0.71, 0.2), strict=True)))
    a = Assessment(id="x", status="ok", p_raw=0.8, spans=ranked[::-1])
    reason = a.reason()
    assert reason.index("'return'") < reason.index("'def'")
    assert "'return' (precision 0.71) in [M3]" in reason


def test_citations_use_the_messages_0_based_index():
    assert cite(0) == "[M0]"


def test_units_take_a_precision_map():
    units = [ScoredUnit(0, 3, 0.2), ScoredUnit(4, 9, 0.8)]
    got = with_precision(units, lambda s: [2 * x for x in s])
    assert [u.precision for u in got] == [0.4, 1.0]  # clipped to [0, 1]
    assert got[1].to_list() == [4, 9, 0.8, 1.0]


class _Map:
    def predict(self, s):
        return np.asarray(s) * 0.5


class _Monitor:
    precision_map = _Map()


def _verdict(extra):
    from calimon.verdict import Verdict

    return Verdict(readout="probe:x", status="ok", p_raw=0.7, extra=extra, transcript_hash="t")


EXTRA = {"segments": [[30, 36, 0.9, None], [0, 3, 0.2, None]],
         "spans": [[0, 3, 0.2], [30, 36, 0.9]]}


def test_serve_answers_the_segments_first_strongest_first_with_precision():
    from calimon.serve.schemas import EvidenceSpan
    from calimon.serve.service import evidence

    got = evidence(_verdict(EXTRA), CODE, _Monitor())
    assert [(g["unit"], g["text"], g.get("rank"), g.get("precision")) for g in got] == [
        ("segment", CODE[30:36], 0, 0.45), ("segment", "def", 1, 0.1),
        ("tokens", "def", None, None), ("tokens", CODE[30:36], None, None)]
    assert all(EvidenceSpan.model_validate(g) for g in got)
    assert evidence(_verdict(EXTRA), CODE)[0]["precision"] is None  # no map: no precision


def test_a_served_answer_becomes_ranked_evidence_with_token_spans_apart():
    from calimon.integrations.remote import assessment_from_answer
    from calimon.serve.service import evidence

    answer = {"request_id": "r", "status": "ok", "p_raw": 0.7, "p_cal": 0.6, "score": "p_cal",
              "decision": "review", "action": "human_review", "audit": False,
              "evidence": evidence(_verdict(EXTRA), CODE, _Monitor()), "tokens": 10,
              "model": "m", "model_revision": "r", "readout": "probe:x", "policy": "p",
              "policy_hash": "h", "latency_ms": 1.0}
    a = assessment_from_answer(_sample(CODE, []), answer, "http://x")
    assert [(s["text"], s["rank"], s["precision"]) for s in a.spans] == [
        (CODE[30:36], 0, 0.45), ("def", 1, 0.1)]
    assert [s["text"] for s in a.token_spans] == ["def", CODE[30:36]]
    assert a.reason().index(CODE[30:36]) < a.reason().index("'def'")


def test_local_assessments_rank_a_reading_without_segments_by_score():
    from calimon.integrations.local import evidence_records

    spans, tokens = evidence_records(_sample(CODE, []), {"spans": EXTRA["spans"]})
    assert [s["text"] for s in spans] == [CODE[30:36], "def"] and [s["rank"] for s in spans] \
        == [0, 1]
    assert [s["text"] for s in tokens] == ["def", CODE[30:36]]


def _row(evidence, parts=None, text=CODE):
    from calimon.review.labels import TrafficRow

    return TrafficRow(item_id="i", request_id="r", kind="score", session_id=None, step=None,
                      received_at=0.0, policy_hash="h", action="human_review", audit=0,
                      audit_id="a", draw=0.0, p_raw=0.7, p_cal=0.6, score=0.6,
                      transcript_hash="t", retained=1, request_text="task",
                      response_text=text, parts=json.dumps(parts) if parts else None,
                      evidence=json.dumps(evidence))


def test_the_review_page_lists_segments_strongest_first_with_a_legend():
    from calimon.review.pages import transcript_html
    from calimon.serve.service import evidence

    page = transcript_html(_row(evidence(_verdict(EXTRA), CODE, _Monitor())))
    items = page[page.index('<ol class="evidence-list">'):]
    assert items.index(CODE[30:36]) < items.index("def")
    assert "precision 0.45" in items and "precision 0.10" in items
    assert 'class="legend"' in page and "<kbd>e</kbd>" in page
    assert '<mark class="ev seg medium" data-rank="0" data-start="30"' in page  # 0.3 <= 0.45 < 0.6
    assert '<span class="tok">' in page  # token-level marks, shown on request


def test_the_map_method_is_the_lowest_out_of_fold_ece():
    from calimon.calibration.segment_precision import METHODS, choose_method

    rng = np.random.default_rng(1)
    s = rng.uniform(size=300)
    y = rng.uniform(size=300) < s
    best, got = choose_method(s, y, [str(i // 3) for i in range(300)])
    assert set(got) == set(METHODS) and got[best] == min(got.values())
