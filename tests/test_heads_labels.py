import numpy as np
import pytest
from conftest import toy_samples

from calimon.errors import InputError
from calimon.scoring.probes.labels import IGNORE, span_offsets, token_labels


def test_overlap_rule_marker_tokens_and_benign_samples():
    offsets = [(0, 4), (4, 9), (9, 10), (-1, -1), (10, 10), (10, 15)]
    assert token_labels(offsets, [(5, 11)]).tolist() == [0, 1, 1, IGNORE, IGNORE, 1]
    assert token_labels(offsets, [(5, 11)], label=False).tolist() == [0, 0, 0, IGNORE,
                                                                      IGNORE, 0]
    assert (token_labels(offsets, [], label=None) == IGNORE).all()
    assert token_labels([], [(0, 1)]).shape == (0,)
    with pytest.raises(InputError, match="gold_spans"):
        token_labels(offsets, [(5, 5)])


def test_span_offsets_turns_markers_into_empty_ranges():
    assert span_offsets([(0, 2), (-1, -1)]) == [(0, 2), (0, 0)]
    assert span_offsets([]) == []


@pytest.mark.model
def test_token_labels_align_with_gold_character_spans(smol):
    """Through the real tokenizer's offsets: the positive tokens cover exactly the gold text,
    up to the whitespace a BPE token carries in front of a word."""
    from transformers import AutoTokenizer

    from calimon.prompts import PromptEncoder, load_prompt

    tok = AutoTokenizer.from_pretrained(str(smol.path))
    enc = PromptEncoder(tok, load_prompt("direct"), "verdict", 1024)
    for s in toy_samples(2):
        e = enc.encode(s.request, s.response)
        labels = token_labels(e.response_token_offsets, s.gold_spans, s.label)
        resp_ids = e.ids[e.response_start:e.response_end]
        assert len(labels) == len(resp_ids) == len(e.response_token_offsets)
        if not s.label:
            assert not (labels == 1).any()
            continue
        (start, end), = s.gold_spans
        pos = np.flatnonzero(labels == 1)
        assert pos.size and np.array_equal(pos, np.arange(pos[0], pos[-1] + 1))  # one run
        text = tok.decode([resp_ids[i] for i in pos])
        assert text.strip() == s.response[start:end].strip()
        covered = {c for i in pos for c in range(*e.response_token_offsets[i])}
        assert set(range(start, end)) <= covered
        assert all(s.response[c].isspace() for c in covered - set(range(start, end)))
