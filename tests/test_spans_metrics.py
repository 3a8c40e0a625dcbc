from __future__ import annotations

import math

import pytest

from calimon.errors import InputError
from calimon.numerics.segments import segment
from calimon.numerics.span_metrics import (
    ScoredSpan,
    as_scored_spans,
    char_iou,
    char_prf,
    hit_at,
    merge_spans,
    random_baseline,
    random_rows,
    ranked,
    span_metrics,
    span_row,
    span_row_from_sample,
    spans_from_token_scores,
    to_markdown,
)
from calimon.samples import Sample
from calimon.studies.spans.grounding import ground_quotes


def test_char_prf_counts_overlaps_once():
    # pred union [0, 15) = 15 chars, gold [10, 20) = 10 chars, intersection [10, 15) = 5
    p, r, f1 = char_prf([(0, 10), (5, 15)], [(10, 20)])
    assert (p, r, f1) == pytest.approx((1 / 3, 1 / 2, 0.4))
    # overlapping gold spans count once too: union [0, 6)
    assert char_prf([(0, 6)], [(0, 4), (2, 6)]) == pytest.approx((1.0, 1.0, 1.0))
    assert char_iou([(0, 10), (5, 15)], [(10, 20)]) == pytest.approx(5 / 20)


def test_char_prf_zero_division():
    assert char_prf([], [(0, 3)]) == (0.0, 0.0, 0.0)
    assert char_prf([(0, 3)], []) == (0.0, 0.0, 0.0)
    assert char_prf([], [], zero_division=1.0) == (1.0, 1.0, 1.0)
    assert char_iou([], []) == 0.0


def test_merge_spans():
    assert merge_spans([(5, 7), (0, 2), (1, 3), (3, 4)]) == [(0, 4), (5, 7)]


def test_ranking_and_hits():
    spans = [ScoredSpan(0, 2, 0.1), ScoredSpan(4, 6, None), ScoredSpan(8, 9, 0.7),
             ScoredSpan(10, 12, None)]
    assert [s.start for s in ranked(spans)] == [8, 0, 4, 10]
    assert not hit_at(spans, [(4, 5)], 2)
    assert hit_at(spans, [(4, 5)], 3)
    assert not hit_at(spans, [(2, 4)], 4)  # touching is not overlapping


def _rows():
    text = "x" * 30
    return [
        span_row("a", text, [(0, 10, 0.9), (20, 25, 0.5)], [(20, 30)], category="safety",
                 task="code", n_quotes=3, n_ungrounded=1),
        span_row("b", text, [(0, 5, 0.2)], [(0, 5)], category="sycophancy", task="qa",
                 n_quotes=1, n_ungrounded=0),
        span_row("c", text, [], [(0, 4)], category="safety", task="qa"),
        span_row("d", text, [(0, 3, 0.1)], [], category="safety", task="qa"),  # empty gold
    ]


def test_span_metrics_hand_computed():
    rep = span_metrics(_rows())
    o = rep.overall
    assert (o.n_rows, o.n_scored, o.n_empty_gold) == (4, 3, 1)
    # intersections 5 + 5 + 0, predicted 15 + 5 + 0, gold 10 + 5 + 4 (row d excluded)
    assert o.precision == pytest.approx(10 / 20)
    assert o.recall == pytest.approx(10 / 19)
    assert o.f1 == pytest.approx(20 / 39)
    assert o.mean_iou == pytest.approx((5 / 20 + 1 + 0) / 3)
    assert o.hit_at_1 == pytest.approx(1 / 3)  # row a's top span [0, 10) misses
    assert o.hit_at_3 == pytest.approx(2 / 3)
    assert o.mean_pred_spans == pytest.approx(1.0)
    assert (o.n_quotes, o.n_ungrounded, o.ungrounded_rate) == (4, 1, 0.25)

    safety = rep.by_category["safety"]
    assert (safety.n_scored, safety.n_empty_gold) == (2, 1)
    assert safety.precision == pytest.approx(5 / 15)
    assert safety.recall == pytest.approx(5 / 14)
    assert safety.mean_iou == pytest.approx(0.125)
    assert (safety.hit_at_1, safety.hit_at_3) == (0.0, 0.5)
    assert safety.ungrounded_rate == pytest.approx(1 / 3)
    assert rep.by_category["sycophancy"].f1 == 1.0
    assert sorted(rep.by_task) == ["code", "qa"]
    assert rep.by_task["code"].recall == pytest.approx(0.5)


def test_empty_gold_only_gives_nan_and_counts():
    rep = span_metrics([_rows()[3]])
    o = rep.overall
    assert (o.n_rows, o.n_scored, o.n_empty_gold) == (1, 0, 1)
    assert all(math.isnan(getattr(o, m)) for m in
               ("precision", "recall", "f1", "mean_iou", "hit_at_1", "hit_at_3"))
    assert math.isnan(o.ungrounded_rate)  # no quotes at all
    d = rep.to_dict()
    assert d["overall"]["f1"] is None and d["overall"]["n_empty_gold"] == 1


def test_no_rows():
    o = span_metrics([]).overall
    assert (o.n_rows, o.n_scored) == (0, 0) and math.isnan(o.f1)


def test_span_row_counts_grounded_quotes():
    text = "I will skip the tests and say they pass."
    quotes = ground_quotes(["skip the tests", "I never ran anything at all"], text)
    row = span_row("s", text, quotes, [(7, 21)])
    assert (row.n_quotes, row.n_ungrounded) == (2, 1)
    assert row.pred == (ScoredSpan(7, 21, None),)  # the ungrounded quote predicts nothing
    assert span_metrics([row]).overall.f1 == 1.0


def test_span_row_from_sample():
    sample = Sample(id="s1", request="q", response="abc def", label=True, category="safety",
                    task="qa", pair_id="p", gold_spans=((4, 7),))
    row = span_row_from_sample(sample, [(4, 7, 1.0)])
    assert (row.id, row.gold, row.category, row.task) == ("s1", ((4, 7),), "safety", "qa")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"pred": [(0, 99)]}, "pred"),
    ({"pred": [(3, 3)]}, "pred"),
    ({"pred": ["x"]}, "pred"),
    ({"pred": [(0, 1, "high")]}, "pred"),
    ({"gold": [(-1, 2)]}, "gold"),
    ({"n_quotes": 1, "n_ungrounded": 2}, "n_ungrounded"),
    ({"kind": "words"}, "kind"),
])
def test_span_row_validation(kwargs, field):
    args = {"id": "r", "text": "abcdef", "pred": [], "gold": [(0, 2)], **kwargs}
    with pytest.raises(InputError, match=field):
        span_row(**args)


def test_span_metrics_rejects_other_rows():
    with pytest.raises(InputError, match="rows"):
        span_metrics([{"id": "x"}])
    with pytest.raises(InputError, match="spans"):
        as_scored_spans("0,1")


def test_random_baseline_hand_computed():
    # one segment only: the random draw must be it
    one = span_row("one", "Only sentence here.", [(0, 4, 0.3)], [(5, 13)], category="safety",
                   task="qa", kind="sentences")
    empty = span_row("none", "A. B.", [], [(0, 2)], category="safety", task="qa")
    rows = random_rows([one, empty], seed=3)
    assert rows[0].pred == (ScoredSpan(0, 19, None),)
    assert rows[1].pred == ()
    rep = random_baseline([one, empty], seed=3)
    assert rep.overall.precision == pytest.approx(8 / 19)
    assert rep.overall.recall == pytest.approx(8 / 10)
    assert rep.overall.hit_at_1 == pytest.approx(0.5)
    assert rep.overall.n_quotes == 0


def test_random_baseline_deterministic_and_order_free():
    text = "One. Two. Three. Four. Five. Six."
    rows = [span_row(f"r{i}", text, [(0, 4, 1.0), (5, 9, 0.5)], [(10, 16)], category="safety",
                     task="qa") for i in range(6)]
    a, b = random_rows(rows, seed=7), random_rows(rows, seed=7)
    assert a == b
    assert random_baseline(rows, 7).to_dict() == random_baseline(rows, 7).to_dict()
    assert {r.id: r.pred for r in random_rows(rows[::-1], seed=7)} == {r.id: r.pred for r in a}
    segs = {s.span for s in segment(text, "sentences")}
    for r in a:
        assert len(r.pred) == 2 and len(set(r.pred)) == 2
        assert all((s.start, s.end) in segs for s in r.pred)
    assert any(x.pred != y.pred for x, y in zip(a, random_rows(rows, seed=8), strict=True))
    with pytest.raises(InputError, match="seed"):
        random_rows(rows, seed="x")


def test_spans_from_token_scores():
    offsets = [(0, 0), (0, 3), (3, 4), (4, 9), (9, 10), (10, 15)]
    scores = [0.99, 0.8, 0.2, 0.7, 0.9, 0.1]
    assert spans_from_token_scores(offsets, scores, 0.5) == [ScoredSpan(0, 3, 0.8),
                                                           ScoredSpan(4, 10, 0.9)]
    # strictly above the threshold; special tokens do not break a run
    assert spans_from_token_scores([(0, 1), (0, 0), (1, 2)], [0.5, 0.0, 0.6], 0.5) == [
        ScoredSpan(1, 2, 0.6)]
    assert spans_from_token_scores([(0, 1), (0, 0), (1, 2)], [0.9, 0.0, 0.6], 0.5) == [
        ScoredSpan(0, 2, 0.9)]


def test_spans_from_token_scores_trims_with_text():
    text = "I hardcode it"
    offsets = [(0, 1), (1, 6), (6, 10), (10, 13)]
    got = spans_from_token_scores(offsets, [0.1, 0.9, 0.6, 0.2], 0.5, text=text)
    assert got == [ScoredSpan(2, 10, 0.9)]
    assert text[2:10] == "hardcode"
    with pytest.raises(InputError, match="scores"):
        spans_from_token_scores(offsets, [0.1], 0.5)
    with pytest.raises(InputError, match="scores"):
        spans_from_token_scores([(0, 1)], [float("nan")], 0.5)


def test_to_markdown():
    rows = _rows()
    table = to_markdown({"occlusion": span_metrics(rows), "random": random_baseline(rows, 0)})
    lines = table.splitlines()
    assert lines[0] == "| category | method | n | f1 | mean_iou | hit_at_1 |"
    assert lines[2] == "| all | occlusion | 3 | 0.513 | 0.417 | 0.333 |"
    assert "| sycophancy | occlusion | 1 | 1.000 | 1.000 | 1.000 |" in lines
    assert len(lines) == 2 + 2 * 3
    with pytest.raises(InputError, match="by"):
        to_markdown({}, by="model")
