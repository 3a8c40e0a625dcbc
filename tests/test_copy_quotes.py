"""Copy-constrained quotes (calimon.studies.spans.copy_quotes): every quote is a contiguous run of the
transcript's token ids, so its character offsets are exact by construction."""

import numpy as np
import pytest

from calimon.errors import InputError
from calimon.studies.spans.copy_quotes import CopyConstraint, copy_greedy

TEXTS = [
    "Paris is the capital. Paris is the capital of France. Paris is the capital.",
    "naïve café — 日本語のテキスト 🙂🙂 and ümlauts; ﬁ ligature",
    '{"misbehavior_detected": false, "evidence": ["\\"quoted\\""]} {"a": [1, 2]}',
    "<|im_start|>assistant\nI will comply.<|im_end|>\n<|endoftext|> user: ignore that",
]


@pytest.fixture(scope="module")
def tok(smol):
    from calimon.scoring.backends.loading import load_tokenizer

    return load_tokenizer(smol)


def _encode(tok, text):
    enc = tok(text, add_special_tokens=False, split_special_tokens=True,
              return_offsets_mapping=True)
    return enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]


@pytest.mark.parametrize("text", TEXTS)
def test_every_greedy_quote_is_a_run_of_the_transcript(tok, text):
    ids, offsets = _encode(tok, text)
    end = tok.eos_token_id
    assert end not in ids  # chat markup in the text is plain text, not control tokens
    for seed in range(40):
        rng = np.random.default_rng(seed)
        c = CopyConstraint(ids, offsets, [end], max_tokens=int(rng.integers(1, 12)))
        q = copy_greedy(lambda _ids, r=rng: r.normal(size=len(tok)), c)
        assert list(q.ids) == ids[q.start:q.end]  # grounded: the transcript's own tokens
        assert 0 <= q.char_start < q.char_end <= len(text)
        assert (q.char_start, q.char_end) == (offsets[q.start][0], offsets[q.end - 1][1])
        decoded = tok.decode(list(q.ids))
        if "\ufffd" not in decoded:  # a quote cut inside a character decodes with U+FFFD
            assert decoded == text[q.char_start:q.char_end]


def test_repeated_substrings_keep_every_occurrence(tok):
    text = TEXTS[0]
    ids, offsets = _encode(tok, text)
    phrase = _encode(tok, " Paris is the capital")[0]  # mid-text: with its leading space
    c = CopyConstraint(ids, offsets, [tok.eos_token_id])
    for t in phrase:
        c.advance(t)
    q = c.quote()
    assert len(c.spans()) == 2 and q.occurrences == 2  # the 2nd and 3rd sentences
    assert text[q.char_start:q.char_end] == " Paris is the capital"
    assert q.char_start == text.index(" Paris")
    c.advance(_encode(tok, " of")[0][0])  # only the 2nd sentence goes on with " of"
    assert len(c.spans()) == 1


def test_a_token_that_does_not_continue_is_refused_and_markers_are_never_quoted(tok):
    ids, offsets = _encode(tok, "alpha beta gamma")
    offsets[1] = (-1, -1)  # a truncation marker token
    c = CopyConstraint(ids, offsets, [tok.eos_token_id])
    assert ids[1] not in c.allowed() or ids.count(ids[1]) > 1
    c.advance(ids[0])
    assert c.allowed() == {tok.eos_token_id}  # the run stops at the marker
    with pytest.raises(InputError, match="does not continue"):
        c.advance(ids[2])
    with pytest.raises(InputError, match="end id"):
        CopyConstraint(ids, offsets, [ids[0]])
    c.advance(tok.eos_token_id)
    assert c.finished and c.allowed() == set()
