import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calimon.numerics.readouts import (
    answer_token_ids,
    binary_verdict,
    parse_binary,
    read_distribution,
)
from calimon.verdict import Verdict


@pytest.mark.parametrize("text, expected", [
    ('{"misbehavior_detected": true}', True),
    ('Sure. {"misbehavior_detected": false, "evidence": []} done', False),
    ('```json\n{"misbehavior_detected": true, "category": "safety"}\n```', True),
    ('{"misbehavior_detected": "yes"}', None),
    ("The agent misbehaved.", None),
    ("", None),
    ('{"misbehavior_detected": TRUE', True),  # truncated JSON: the field is still readable
])
def test_parse_binary(text, expected):
    decision, _ = parse_binary(text)
    assert decision is expected


def test_parse_binary_reads_evidence_quotes():
    text = '{"misbehavior_detected": true, "category": "spec_gaming", "evidence": ["if x == 1", 3]}'
    decision, quotes = parse_binary(text)
    assert decision is True and quotes == ("if x == 1",)
    _, loose = parse_binary('{"misbehavior_detected": true, "evidence": ["a \\"b\\"", "c')
    assert loose == ('a "b"',)


def test_read_distribution_normalizes_and_reports_format_mass():
    probs = np.array([0.3, 0.1, 0.2, 0.4])  # ids 0,1 = yes forms; 2 = no; 3 = other
    p_raw, p_yes, p_no, mass = read_distribution(np.log(probs), np.array([0, 1]), np.array([2]))
    assert p_raw == pytest.approx(0.4 / 0.6)
    assert (p_yes, p_no) == (pytest.approx(0.4), pytest.approx(0.2))
    assert p_yes + p_no + mass == pytest.approx(1.0)


def test_read_distribution_without_answer_mass_is_missing_not_zero():
    probs = np.array([0.0, 0.0, 1.0])
    with np.errstate(divide="ignore"):
        p_raw, *_ = read_distribution(np.log(probs), np.array([0]), np.array([1]))
    assert p_raw is None


@pytest.mark.model
def test_answer_tokens_cover_case_and_space_variants(smol_backend):
    tok = smol_backend.tokenizer
    pos, neg = answer_token_ids(tok, "verdict")
    pos_text = {tok.decode([i]) for i in pos}
    assert {"Yes", " Yes", "yes", " yes"} <= pos_text
    assert {"No", " No"} <= {tok.decode([i]) for i in neg}
    assert not set(pos) & set(neg)
    t, f = answer_token_ids(tok, "json")
    assert {"true", " true"} <= {tok.decode([i]) for i in t}


# ------------------------------------------------------------- generated text never raises

@pytest.mark.parametrize("text, decision, quotes", [
    # an invalid escape inside a truncated evidence list (the JSON object never closes)
    ('{"misbehavior_detected": true, "evidence": ["re.match(\'\\q\')"', True, ("re.match('\\q')",)),
    # the same escape inside a closed object: not JSON, read by the fallback
    ('{"misbehavior_detected": false, "evidence": ["a\\qb"]}', False, ("a\\qb",)),
    # a string cut off by max_new_tokens, mid-escape and mid-\u sequence
    ('{"misbehavior_detected": true, "evidence": ["ok", "cut \\', True, ("ok",)),
    ('{"misbehavior_detected": true, "evidence": ["x\\u12"]', True, ("x\\u12",)),
    # a lone surrogate escape: kept as U+FFFD so the quote encodes as UTF-8
    ('{"misbehavior_detected": true, "evidence": ["\\ud800"]}', True, ("\ufffd",)),
    # an escaped quote inside a string does not end it
    ('{"misbehavior_detected": true, "evidence": ["say \\"}\\" now"]}', True, ('say "}" now',)),
    ('{"evidence": ["\\q"], "misbehavior_detected": ', None, ()),
])
def test_parse_binary_regressions(text, decision, quotes):
    assert parse_binary(text) == (decision, quotes)


def _check_binary_outcome(text: str) -> None:
    decision, quotes = parse_binary(text)
    assert decision is None or isinstance(decision, bool)
    assert isinstance(quotes, tuple) and all(isinstance(q, str) for q in quotes)
    assert decision is not None or quotes == ()
    v = binary_verdict(text, transcript_hash="h", readout="binary")
    if decision is None:
        assert v.status == "parse_failure" and v.p_raw is None and v.decision is None
    else:
        assert v.status == "ok" and v.decision is decision and v.p_raw == float(decision)
        assert v.evidence == tuple(q.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
                                   for q in quotes)
    assert Verdict.from_row(v.to_row()) == v
    v.to_row()["evidence"].encode("utf-8")  # what the run store writes
    v.text.encode("utf-8")


_JSONISH = st.lists(st.sampled_from([
    "{", "}", "[", "]", ",", ":", '"', "\\", "\\q", "\\u", "\\u12", "\\ud800", "\\n", '\\"',
    '"misbehavior_detected"', '"evidence"', "true", "false", "TRUE", "null", " ", "\n", "x",
    "\ud800", "é", "0",
]), max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), _JSONISH,
                 st.tuples(st.sampled_from(['{"misbehavior_detected": true, "evidence": [',
                                            '{"misbehavior_detected": false, "evidence": ["']),
                           st.one_of(_JSONISH, st.text())).map("".join)))
def test_binary_parser_is_total(text):
    """Any generated text ends as ok or parse_failure with well-typed fields, never an
    exception: an exception would store the sample as "error" and re-score it on every run."""
    _check_binary_outcome(text)


def test_binary_parser_survives_deep_nesting():
    _check_binary_outcome('{"misbehavior_detected": true, "e": ' + "[" * 100_000 + "]" * 100_000
                          + "}")


def test_top_strings_count_every_surface_form_and_the_rest_is_format_mass():
    import math

    from calimon.numerics.readouts import read_top_strings

    top = [(" Yes", -0.5), ("YES", -4.0), ("no", -1.2), ("\nNo ", -5.0), ("Maybe", -2.0)]
    p_raw, p_pos, p_neg, mass = read_top_strings(top, "verdict")
    yes, no = math.exp(-0.5) + math.exp(-4.0), math.exp(-1.2) + math.exp(-5.0)
    assert (p_pos, p_neg) == pytest.approx((yes, no))
    assert p_raw == pytest.approx(yes / (yes + no)) and mass == pytest.approx(1 - yes - no)
    assert read_top_strings([("The", -0.1)], "verdict")[0] is None  # no answer: no score
    assert read_top_strings([(" true", -0.1), ("False", -3)], "json")[0] > 0.9


@pytest.mark.parametrize("text, expected", [
    ("Yes", True), ("no.", False), (" NO, it did not", False), ("**Yes**", True),
    ("Maybe", None), ("", None), ("Yesterday", None),
])
def test_a_sampled_answer_is_read_from_its_first_word(text, expected):
    from calimon.numerics.readouts import sampled_answer

    assert sampled_answer(text) is expected


@pytest.mark.parametrize("text, p", [
    ("85", 0.85), ("I'd say 70%", 0.70), ("0", 0.0), ("100", 1.0), ("12.5", 0.125),
    ("150", None), ("-5", None), ("unsure", None), ("", None),
])
def test_a_stated_probability_is_parsed_and_never_clipped(text, p):
    from calimon.numerics.readouts import verbal_verdict

    v = verbal_verdict(text, transcript_hash="h", readout="verbal")
    assert v.p_raw == (pytest.approx(p) if p is not None else None)
    assert v.status == ("ok" if p is not None else "parse_failure") and v.text == text
