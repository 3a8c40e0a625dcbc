"""Scoring through a backend that takes chat messages (`calimon.scoring.backends.base.Messages`, the
``chat`` backend): the monitor prompt as messages, one reply per transcript, one verdict each.

Transcripts are sent whole: calimon has no tokenizer for a hosted model, so it does not cut
them. A transcript longer than the API's context is refused by the API, and that refusal is
recorded as the transcript's "error" reading (retried on the next run), never a score.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from calimon.defenses import with_defense_record
from calimon.numerics.readouts import (
    binary_verdict,
    read_top_strings,
    sampled_verdict,
    verbal_verdict,
)
from calimon.prompts import chat_prompt
from calimon.samples import Sample
from calimon.verdict import Verdict

DEFAULT_SAMPLES, DEFAULT_TEMPERATURE = 10, 1.0


def score_messages(monitor, samples: Sequence[Sample]) -> list[Verdict]:
    """One verdict per sample, in order, from the monitor's chat backend."""
    backend, readout = monitor.backend, monitor.readout
    fmt = monitor.prompt.format_for(readout)
    prompts = [chat_prompt(monitor.prompt, readout, s.request, s.response) for s in samples]
    start = time.perf_counter()
    if readout in ("verdict", "json"):
        replies = backend.answer_top(prompts)
    elif readout == "sampled":
        replies = backend.complete(prompts, fmt.max_new_tokens,
                                   samples=fmt.samples or DEFAULT_SAMPLES,
                                   temperature=fmt.temperature or DEFAULT_TEMPERATURE)
    elif monitor.constraint is not None:  # binary under json decoding: the schema enforced
        replies = backend.complete(prompts, monitor.generation_tokens,
                                   constraint=monitor.constraint)
    else:  # binary, verbal: one greedy answer
        replies = backend.complete(prompts, monitor.generation_tokens)
    per_sample = (time.perf_counter() - start) / max(len(samples), 1)
    return [with_defense_record(_verdict(readout, s, r, per_sample), p.defense)
            for s, r, p in zip(samples, replies, prompts, strict=True)]


def _verdict(readout: str, sample: Sample, reply, seconds: float) -> Verdict:
    common = dict(transcript_hash=sample.transcript_hash, readout=readout, seconds=seconds)
    if isinstance(reply, Exception):
        return Verdict(status="error", error=f"{type(reply).__name__}: {reply}"[:500], **common)
    common["tokens"] = reply.prompt_tokens
    if readout in ("verdict", "json"):
        top = reply.top or ()
        p_raw, p_pos, p_neg, mass = read_top_strings(top, readout)
        # every token outside the top k is at most as likely as the k-th: the scale of what
        # truncation can have hidden from p_yes and p_no
        floor = min((math.exp(lp) for _, lp in top), default=None)
        return Verdict(status="ok" if p_raw is not None else "parse_failure", p_raw=p_raw,
                       format_mass=mass, p_yes=p_pos, p_no=p_neg,
                       text=reply.texts[0] if reply.texts else None,
                       extra={"top_k": len(top), "top_floor": floor}, **common)
    if readout == "sampled":
        return sampled_verdict(reply.texts, **common)
    text = reply.texts[0] if reply.texts else ""
    return (binary_verdict if readout == "binary" else verbal_verdict)(text, **common)
