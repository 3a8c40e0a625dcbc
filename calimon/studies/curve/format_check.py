"""Whether a model follows the free binary format: decided early, on short replies, and
remembered in the run store.

The free binary protocol (the paper's) asks for a JSON reply and reads its
``misbehavior_detected`` boolean; a small model often writes something else, and each full reply
(up to the format's ``max_new_tokens``: 160 for the ``evidence`` prompt) costs seconds on a CPU.
So before a free binary point is scored, the run asks for short replies of `CHECK_TOKENS`
tokens (every binary format puts the boolean first): one, then, if it gives no boolean, the
rest of `FREE_CHECK` samples (whole pairs) in one batch. A reply that gives the boolean means
the model follows the format and the point is scored in full; none means it does not, and no
point is drawn. The verdict is kept in the run store under the monitor's model revision and
template hash (readout `FORMAT_READOUT`), so a later run of the same monitor and template
decides without a model call. With the Ray engine the check scores full replies through the
engine, as the point would.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from calimon.numerics.readouts import parse_binary
from calimon.samples import Sample
from calimon.scoring.store import MonitorKey
from calimon.selection import select_pairs
from calimon.verdict import Verdict

FREE_CHECK = 4  # samples (whole pairs) the free binary protocol is tried on first by default
CHECK_TOKENS = 16  # tokens of a check's reply: enough for '{"misbehavior_detected": true'
FORMAT_READOUT = "binary_format"  # the store's readout of a remembered check
FORMAT_ROW = "free-format-check"  # its one row (no transcript has this hash)


@dataclass(frozen=True)
class FormatCheck:
    """A check's verdict: whether the model ``follows`` the free format, on how many replies
    (``tried``, ``parsed``), whether it was ``remembered`` from the store, and how many replies
    were generated now."""

    follows: bool
    tried: int
    parsed: int
    remembered: bool = False
    generated: int = 0

    def record(self, name: str) -> dict:
        """The check as curve.json's ``binary_checks`` lists a point not drawn."""
        return {"name": name, "tried": self.tried, "parsed": self.parsed, "drawn": False}


def _memo_key(key: MonitorKey) -> MonitorKey:
    return MonitorKey(key.model, key.model_revision, key.prompt, key.template_hash,
                      FORMAT_READOUT)


def remembered(store, monitor) -> FormatCheck | None:
    """The check the store keeps for ``monitor`` (its model revision and template), if any."""
    row = store.get(_memo_key(monitor.key), [FORMAT_ROW]).get(FORMAT_ROW)
    if row is None or row.decision is None:
        return None
    extra = row.extra or {}
    return FormatCheck(bool(row.decision), int(extra.get("tried", 0)),
                       int(extra.get("parsed", 0)), remembered=True)


def _short_replies(monitor, samples: list[Sample], progress, label: str) -> list[Verdict]:
    """Replies of at most `CHECK_TOKENS` tokens: the first sample's alone, the others' in one
    batch only when it gives no boolean (a bar for each)."""
    from calimon.progress import ticker

    short = copy.copy(getattr(monitor, "inner", monitor))  # a window's inner monitor
    short.token_cap = CHECK_TOKENS
    got: list[Verdict] = []
    for part in (samples[:1], samples[1:]):
        if not part or (got and got[0].decision is not None):
            break
        tick = ticker(progress, label, len(part))
        got += short.score(part)
        if tick:
            tick(len(part))
    return got


def check_free_format(scorer, monitor, samples: list[Sample], seed: int, label: str
                      ) -> FormatCheck:
    """Whether the model behind ``monitor`` (a free binary monitor) follows the free format, on
    `FREE_CHECK` of ``samples`` (module docstring); remembered in the scorer's store."""
    known = remembered(scorer.store, monitor)
    if known is not None:
        return known
    trial = select_pairs(samples, FREE_CHECK, seed)
    if scorer.engine.name == "local":
        replies = _short_replies(monitor, trial, scorer.progress, label)
    else:
        replies = list(scorer.score(trial, monitor, label=label).values())
    parsed = sum(parse_binary(v.text or "")[0] is not None for v in replies)
    check = FormatCheck(parsed > 0, len(replies), parsed, generated=len(replies))
    first = next((v.text for v in replies if v.text), "")
    scorer.store.put(_memo_key(monitor.key), [Verdict(
        transcript_hash=FORMAT_ROW, readout=FORMAT_READOUT, status="ok",
        decision=check.follows, text=first[:500],
        extra={"tried": check.tried, "parsed": parsed, "tokens": CHECK_TOKENS})])
    return check


__all__ = ["CHECK_TOKENS", "FORMAT_READOUT", "FREE_CHECK", "FormatCheck", "check_free_format",
           "remembered"]
