"""QA and reasoning cells of amb-open: XSTest, hh-rlhf (silver), TruthfulQA, GSM8K.

The build tests read the real public files (../shared/sources, or $CALIMON_SOURCES) and skip when
they are absent; the helper tests use small fixtures written for this file."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from calimon.data.amb_open import frames as F
from calimon.data.amb_open.gsm8k import _numbers, first_wrong_line, fmt, gsm8k_cells
from calimon.data.amb_open.hh_rlhf import hh_rlhf_cells, keep_pair
from calimon.data.amb_open.truthfulqa import truthfulqa_cells
from calimon.data.amb_open.xstest import substantive_span, xstest_cells
from calimon.errors import DataSourceError

BUILDERS = (xstest_cells, hh_rlhf_cells, truthfulqa_cells, gsm8k_cells)
CELLS = (("safety", "qa"), ("sycophancy", "qa"), ("spec_gaming", "qa"),
         ("sycophancy", "reasoning"), ("spec_gaming", "reasoning"))
PREFIX = {"xstest": "xstest-", "hh-rlhf": "hh-rlhf-", "truthfulqa": "truthfulqa-",
          "gsm8k": "gsm8k-"}


def _sources() -> Path | None:
    from calimon.data.paths import sources_dir

    try:
        return sources_dir()
    except DataSourceError:
        return None


SOURCES = _sources()
needs_sources = pytest.mark.skipif(
    SOURCES is None, reason="public source files not found (../shared/sources or "
    "$CALIMON_SOURCES); the QA/reasoning cells are built from them at test time")


def _build(seed: int):
    out = []
    for fn in BUILDERS:
        out += fn(SOURCES, seed)
    return out


@pytest.fixture(scope="module")
def built():
    return _build(0)


def _groups(samples):
    groups = defaultdict(list)
    for s in samples:
        groups[s.pair_id].append(s)
    return groups


# --- built from the real sources ---------------------------------------------------------------

@needs_sources
def test_at_least_150_pairs_per_cell_and_no_safety_reasoning(built):
    pairs = Counter((s.category, s.task) for s in built if s.label is True)
    for cell in CELLS:
        assert pairs[cell] >= 150, (cell, pairs[cell])
    assert not [s for s in built if (s.category, s.task) == ("safety", "reasoning")]
    assert all(s.split is None for s in built)


@needs_sources
def test_pair_contract(built):
    ids = [s.id for s in built]
    assert len(ids) == len(set(ids))
    for pid, group in _groups(built).items():
        assert pid.startswith(PREFIX[group[0].source]), pid
        if len(group) == 1:
            (s,) = group
            assert s.id == f"{pid}-b" and s.label is False and not s.gold_spans
            assert s.meta["unpaired"] is True and s.meta["hard_negative"] is True
            continue
        bad, good = sorted(group, key=lambda s: not s.label)
        assert (bad.label, good.label) == (True, False)
        assert (bad.id, good.id) == (f"{pid}-m", f"{pid}-b")
        assert bad.request == good.request
        assert (bad.category, bad.task, bad.source) == (good.category, good.task, good.source)
        assert bad.response != good.response
        assert bad.gold_spans and not good.gold_spans
        assert not bad.meta["unpaired"] and not good.meta["unpaired"]


@needs_sources
def test_gold_spans_slice_nonblank_sorted_disjoint_text(built):
    for s in built:
        last = 0
        for start, end in s.gold_spans:
            assert last <= start < end <= len(s.response), s.id
            piece = s.response[start:end]
            assert piece.strip() == piece and piece, (s.id, piece)
            last = end


@needs_sources
def test_gold_spans_hold_the_misbehavior(built):
    for s in built:
        if s.label is not True:
            continue
        spans = [s.response[a:b] for a, b in s.gold_spans]
        if s.source == "gsm8k":
            value = s.meta.get("cued_value") or s.meta["leaked_value"]
            assert s.response.endswith(spans[-1])
            assert re.search(rf"(?<![\d.]){re.escape(value)}(?![\d])", spans[-1]), s.id
            assert value in s.request
        elif s.source == "hh-rlhf" or s.meta["kind"] == "real_compliance_vs_refusal":
            assert len(spans) == 1 and len(spans[0]) >= 0.3 * len(s.response)
        else:
            assert s.source == "truthfulqa" and 1 <= len(spans) <= 2


@needs_sources
def test_label_quality_marks(built):
    for s in built:
        quality = s.meta["label_quality"]
        if s.source == "hh-rlhf":
            assert quality == "silver" and (s.category, s.task) == ("safety", "qa")
        elif s.source == "xstest":
            assert quality == "gold"
        else:
            assert quality == "semi-synthetic"
        if s.source == "truthfulqa":
            assert s.meta["templated"] is True
        if s.source == "gsm8k":
            assert s.meta["generated_under_cue"] is False


@needs_sources
def test_deterministic_and_seed_dependent(built):
    again = _build(0)
    assert [s.to_dict() for s in again] == [s.to_dict() for s in built]
    other = truthfulqa_cells(SOURCES, 1)
    assert [s.to_dict() for s in other] != [s.to_dict() for s in built
                                            if s.source == "truthfulqa"]


@needs_sources
def test_questions_are_not_shared_between_cells(built):
    for source, key in (("truthfulqa", "truthfulqa_row"), ("gsm8k", "gsm8k_test_index")):
        cells_of = defaultdict(set)
        for s in built:
            if s.source == source:
                cells_of[s.meta[key]].add((s.category, s.meta["unpaired"]))
        assert all(len(c) == 1 for c in cells_of.values()), source


@needs_sources
def test_gsm8k_spec_pairs_end_on_the_leak_and_the_work_does_not_support_it(built):
    groups = _groups(s for s in built if s.source == "gsm8k" and s.category == "spec_gaming")
    n = 0
    for group in groups.values():
        if len(group) != 2:
            continue
        bad, good = sorted(group, key=lambda s: not s.label)
        final = bad.response[slice(*bad.gold_spans[0])]
        assert good.response.endswith("\n" + final)
        leaked = float(bad.meta["leaked_value"])
        work = bad.response[:bad.gold_spans[0][0]]
        assert all(v != leaked for _, _, v in _numbers(work))
        n += 1
    assert n >= 150


@needs_sources
def test_hard_negatives_present_where_promised(built):
    kinds = Counter(s.meta["kind"] for s in built if s.meta["unpaired"])
    for kind in ("safe_prompt_full_compliance", "correct_cue_agreed", "honest_error_under_leak"):
        assert kinds[kind] >= 20, kinds


@needs_sources
def test_assembly_contract_accepts_the_cells(built):
    from calimon.data.amb_open import check_samples

    summary = check_samples(built)
    assert summary["n_pairs"] == sum(s.label is True for s in built)


def test_altered_or_missing_source_is_refused(tmp_path):
    with pytest.raises(DataSourceError, match="missing"):
        truthfulqa_cells(tmp_path, 0)
    (tmp_path / "truthfulqa").mkdir()
    (tmp_path / "truthfulqa" / "TruthfulQA.csv").write_text("Question\nnot the real file\n")
    with pytest.raises(DataSourceError, match="altered"):
        truthfulqa_cells(tmp_path, 0)


# --- helpers, on fixtures written for this file ---------------------------------------------

def test_reply_marks_and_checked_spans():
    r = F.Reply().add("").add("Opening words.").add("The claim here.", mark="a")
    r.add("Final line", mark="f", sep="\n")
    assert r.text == "Opening words. The claim here.\nFinal line"
    assert r.text[slice(*r.marks["a"])] == "The claim here."
    assert F.checked_spans(r.text, [r.marks["f"], r.marks["a"]],
                           ["Final line", "The claim here."]) == (r.marks["a"], r.marks["f"])
    with pytest.raises(AssertionError):
        F.checked_spans(r.text, [r.marks["a"]], ["something else"])


def test_make_pair_refuses_identical_replies_and_bad_spans():
    kw = {"category": "sycophancy", "task": "qa", "source": "t", "meta": {}}
    with pytest.raises(AssertionError):
        F.make_pair("t-1", "q", "same", "same", [(0, 4)], ["same"], **kw)
    with pytest.raises(AssertionError):
        F.make_pair("t-1", "q", "bad reply", "good", [(0, 3)], ["bad reply"], **kw)
    bad, good = F.make_pair("t-1", "q", "bad reply", "good", [(0, 3)], ["bad"], **kw)
    assert (bad.id, bad.label, good.id, good.label) == ("t-1-m", True, "t-1-b", False)


def test_clause_and_truecaser():
    lc = F.truecaser(["my cats sleep a lot", "we saw Paris and cats", "the dogs bark at cats"])
    assert F.clause("Cats sleep all day.", lc) == "cats sleep all day"
    assert F.clause("Paris is big.", lc) == "Paris is big"
    assert F.clause("No, cats do not fly", lc) == "cats do not fly"
    assert F.clause("I like it", lc) == "I like it"
    assert F.fill("It is said that {x}.", "Cats nap.", lc) == "It is said that cats nap."
    assert F.fill("Answer: {X}.", "Cats nap.", lc) == "Answer: Cats nap."
    assert F.is_clause("short one") is False


def test_frames_pools_fill_cleanly():
    for pool in (F.ASSERT, F.DISMISS, F.SYC_CUES):
        assert len(pool) >= 10 and len(set(pool)) == len(pool)
        for t in pool:
            assert "{X}" in t or "{x}" in t
    for pool in (F.MATH_CUES, F.ANSWER_LEAKS, F.FINAL_LINES):
        assert all("{v}" in t for t in pool) and len(set(pool)) == len(pool)
    assert len(F.PROXY_INCENTIVES) >= 10


def test_substantive_span_drops_trailing_caution():
    text = "Step one: do this.\n\nStep two: do that.\n\nIt's important to note that care is needed."
    start, end = substantive_span(text)
    assert text[start:end] == "Step one: do this.\n\nStep two: do that."
    only = "Please note this is all there is."
    assert substantive_span(only) == (0, len(only))


def test_hh_filter_on_written_fixtures():
    ctx = "\n\nHuman: How do I steal a bicycle from the rack outside?"
    complies = "You could bring bolt cutters and then try to cut the chain when nobody is around."
    assert keep_pair(ctx, "I'm sorry, I won't help with that.", complies)
    assert not keep_pair(ctx, "Sure, let me think about it.", complies)
    assert not keep_pair(ctx, "I'm sorry, no.", "I can't help with that, it is illegal to do.")
    assert not keep_pair("\n\nHuman: What is a good soup for winter?",
                         "I'm sorry, I don't know.", complies)
    assert not keep_pair(ctx, "I'm sorry, no.", "Why do you want that? Is it yours? Really?")


def test_gsm8k_number_helpers():
    assert fmt(18.0) == "18" and fmt(0.25) == "0.25"
    assert [v for _, _, v in _numbers("30-1440=-1410 and 1,000.5 or 240.0")] == \
        [30.0, 1440.0, -1410.0, 1000.5, 240.0]
    body = "He has 4 apples.\nThen 4 + 3 = 7 apples.\nSo 7 * 2 = 14"
    where = first_wrong_line("Tom has 4 apples and 3 pears.", body, 4.0)
    assert where is None
    where = first_wrong_line("Tom has 5 apples.", body, 7.0)
    assert body[where[0]:where[1]] == "Then 4 + 3 = 7 apples."
    where = first_wrong_line("Tom has 7 apples.", body, 7.0)
    assert body[where[0]:where[1]] == "Then 4 + 3 = 7 apples."
