"""Does the json-decoded binary point lie on the curve? The check of one transcript: the
greedy decision under ``json`` decoding against the json readout's ``p_raw >= 0.5``, read from
the same prompt and position, and, when they differ, which of the cases named in
`calimon.decoding` explains it.

The first decoding step is recomputed from the json readout's next-token log-probs: the
tokens the constraint allows there (outlines-core's guide at its initial state), the most
likely of them, and whether it is a whole answer word (then greedy decoding has decided).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TIE = 1e-3  # log-prob margin under which two passes may order the top two tokens differently


@dataclass(frozen=True)
class FirstStep:
    """The constrained first step at the json readout's position: the most likely allowed
    token, its answer word (True for true, False for false, None for a piece or a space), and
    its log-prob margin over the next allowed token."""

    token: int
    word: bool | None
    margin: float


def first_step(tokenizer, constraint, logprobs: np.ndarray, pos: np.ndarray,
               neg: np.ndarray) -> FirstStep:
    """The constrained greedy first step of one prompt from its next-token log-probs."""
    import outlines_core

    from calimon.scoring.backends.constrained import regex_index

    allowed = np.array(outlines_core.Guide(regex_index(tokenizer, constraint.regex))
                       .get_tokens(), dtype=np.int64)
    allowed = allowed[allowed < logprobs.shape[0]]
    lp = logprobs[allowed].astype(np.float64)
    order = np.argsort(-lp)
    top = int(allowed[order[0]])
    margin = float(lp[order[0]] - lp[order[1]]) if order.size > 1 else float("inf")
    word = True if top in set(pos.tolist()) else False if top in set(neg.tolist()) else None
    return FirstStep(top, word, margin)


def case_of(decision: bool | None, p_raw: float | None, step: FirstStep) -> str:
    """``agree``; or why the decision differs from ``p_raw >= 0.5``: ``deferred`` (case a: the
    top allowed token is not a whole word), ``top-token`` (case b: the decision follows the
    most likely allowed answer token, whose word has the smaller summed mass), ``near-tie``
    (case c); ``unexplained`` otherwise (a parse failure, or a decision against its own
    first step: decoding not constrained or not greedy)."""
    if decision is None or p_raw is None:
        return "unexplained"
    if decision == (p_raw >= 0.5):
        return "agree"
    if step.word is None:
        return "deferred"
    if step.margin < TIE:
        return "near-tie"
    if step.word == decision:
        return "top-token"
    return "unexplained"


def follows_first_step(decision: bool | None, step: FirstStep) -> bool:
    """Whether the decision is the word of the constrained first step (always, unless the
    step was not a whole word or its margin is a near tie)."""
    if step.word is None or step.margin < TIE:
        return True
    return decision == step.word


__all__ = ["FirstStep", "TIE", "case_of", "first_step", "follows_first_step"]
