import numpy as np
import pytest

from calimon.readouts import answer_token_ids, parse_binary, read_distribution


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
