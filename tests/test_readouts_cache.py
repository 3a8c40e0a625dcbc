"""The answer-token cache follows the tokenizer object, not its id()."""

from __future__ import annotations

import gc

from test_model_check import _Vocab  # a tokenizer stand-in with a fixed vocabulary

from calimon import readouts


def test_a_new_tokenizer_never_gets_the_answer_ids_of_a_freed_one():
    for _ in range(50):  # CPython reuses a freed object's id at once: the old cache leaked here
        first = _Vocab(["yes", "no", "x"])
        assert readouts.answer_token_ids(first, "verdict")[0].tolist() == [0]
        del first
        gc.collect()
        second = _Vocab(["x", "no", "yes"])
        pos, neg = readouts.answer_token_ids(second, "verdict")
        assert pos.tolist() == [2] and neg.tolist() == [1]
        del second
        gc.collect()
