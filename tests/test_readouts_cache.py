"""The answer-token cache follows the tokenizer object, not its id()."""

from __future__ import annotations

from test_model_check import _Vocab  # a tokenizer stand-in with a fixed vocabulary

from calimon.numerics import readouts


def test_a_new_tokenizer_never_gets_the_answer_ids_of_a_freed_one():
    # CPython frees an object without reference cycles at `del` and reuses its id at once: an
    # id-keyed cache leaked here. No gc.collect() is needed for that (a full collection in a
    # process holding torch models costs ~0.5 s each), and the test checks that ids were reused.
    reused = 0
    for _ in range(50):
        first = _Vocab(["yes", "no", "x"])
        assert readouts.answer_token_ids(first, "verdict")[0].tolist() == [0]
        first_id = id(first)
        del first
        second = _Vocab(["x", "no", "yes"])
        reused += id(second) == first_id
        pos, neg = readouts.answer_token_ids(second, "verdict")
        assert pos.tolist() == [2] and neg.tolist() == [1]
        del second
    assert reused > 0, "no id was reused: the test did not exercise the freed-id case"
