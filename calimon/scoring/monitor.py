"""A monitor = backend + prompt template + readout. `score(samples) -> list[Verdict]`.

`calimon.scoring.engines.make_monitor` builds the monitor of any readout name (probe heads included);
`calimon.scoring.engines.Scorer` is the service that scores through the run store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from calimon.decoding import Constraint, check_decoding, json_constraint
from calimon.defenses import with_defense_record
from calimon.errors import CalimonError
from calimon.numerics.readouts import (
    answer_token_ids,
    binary_verdict,
    read_distribution,
    verbal_verdict,
)
from calimon.prompts import PromptEncoder, PromptTemplate, encoder_for, prompt_format_of
from calimon.samples import Sample
from calimon.scoring.backends.base import Constrained, Messages, Sampling, requires, supports
from calimon.scoring.store import MonitorKey, RunStore
from calimon.verdict import Verdict

# readouts read from one greedy generation, and how its text becomes a verdict
GENERATED = {"binary": binary_verdict, "verbal": verbal_verdict}


class Monitor:
    """Reads a backend's verdict on transcripts through a prompt template: ``verdict`` (P(Yes)
    of the next token), ``json`` (P(true)), ``binary`` (a generated JSON decision), ``verbal``
    (a stated probability) or ``sampled`` (the share of Yes among sampled answers; backends
    with the `Sampling` capability). A backend that takes chat messages is scored by
    `calimon.scoring.monitor_chat.score_messages`.

    ``decoding`` (binary readout only): ``free`` (the paper's protocol) or ``json`` (the answer
    held to the template's JSON schema, decoded from the json readout's prompt and prefix; see
    `calimon.decoding`); needs a backend with the `Constrained` capability."""

    token_cap: int | None = None  # set on a copy for short replies (a format check)

    def __init__(self, backend, prompt: PromptTemplate, readout: str,
                 max_input_tokens: int | None = None, decoding: str = "free"):
        self.backend = backend
        self.prompt = prompt
        self.readout = readout
        self.max_input_tokens = max_input_tokens
        self.decoding = decoding
        prompt.format_for(readout)  # fail early on a readout the template lacks
        check_decoding(decoding, readout)
        self.constraint: Constraint | None = None
        if decoding == "json":
            requires(backend, Constrained, needed_for="--binary-decoding json")
            self.constraint = json_constraint(prompt)
        self._encoder: PromptEncoder | None = None

    @property
    def key(self) -> MonitorKey:
        """The run-store key of this monitor's readings (model revision, prompt, template hash,
        readout)."""
        ref = self.backend.model_ref
        # a chat API renders the messages itself: its prompts are keyed apart ("messages")
        fmt = "messages" if supports(self.backend, Messages) else prompt_format_of(self.backend)
        decoding = self.constraint.describe() if self.constraint is not None else None
        return MonitorKey(ref.name, ref.revision, self.prompt.name,
                          self.prompt.template_hash(self.readout, fmt, decoding=decoding),
                          self.readout)

    @property
    def encoder(self) -> PromptEncoder:
        """The prompt encoder for this readout, made on first use (input limit:
        ``max_input_tokens``, else the model config's). Under json decoding: the json
        readout's prompt, with room for the binary format's answer."""
        if self._encoder is None:
            limit = self.max_input_tokens or self.backend.model_ref.config.max_input_tokens
            if self.constraint is not None:
                self._encoder = encoder_for(self.backend, self.prompt, "json", limit,
                                            self.generation_tokens)
            else:
                self._encoder = encoder_for(self.backend, self.prompt, self.readout, limit)
        return self._encoder

    @property
    def generation_tokens(self) -> int:
        """The most tokens a generated readout may write (its format's ``max_new_tokens``, at
        most ``token_cap`` when set)."""
        most = self.prompt.format_for(self.readout).max_new_tokens
        return most if self.token_cap is None else min(most, self.token_cap)

    def _generate(self, ids: list[list[int]]) -> list[str]:
        """The answer text of each prompt: a greedy generation, held to the constraint (and
        preceded by its prefix, which the prompt ends with) under json decoding."""
        tok = self.backend.tokenizer
        if self.constraint is None:
            outputs = self.backend.generate(ids, self.generation_tokens)
            return [tok.decode(o, skip_special_tokens=True) for o in outputs]
        outputs = self.backend.generate(ids, self.generation_tokens, constraint=self.constraint)
        return [self.constraint.prefix + tok.decode(o, skip_special_tokens=True)
                for o in outputs]

    def score(self, samples: Sequence[Sample]) -> list[Verdict]:
        """One verdict per sample, in order, from one backend call (no store)."""
        if supports(self.backend, Messages):
            from calimon.scoring.monitor_chat import score_messages

            return score_messages(self, samples)
        if self.readout == "sampled":
            requires(self.backend, Sampling, needed_for="the sampled readout")
        encoded = [self.encoder.encode(s.request, s.response) for s in samples]
        start = time.perf_counter()
        if self.readout in GENERATED:
            texts = self._generate([e.ids for e in encoded])
        else:
            logprobs = self.backend.next_token_logprobs([e.ids for e in encoded],
                                                        self.encoder.prefix_len)
        per_sample = (time.perf_counter() - start) / max(len(samples), 1)
        verdicts = []
        for i, (s, e) in enumerate(zip(samples, encoded, strict=True)):
            trunc = e.truncation.__dict__ if e.truncation else None
            status = "truncated" if trunc else "ok"
            common = dict(transcript_hash=s.transcript_hash, readout=self.readout,
                          tokens=len(e.ids), seconds=per_sample, truncation=trunc)
            if self.readout in GENERATED:
                if self.constraint is not None:
                    common["extra"] = {"decoding": self.decoding}
                verdicts.append(GENERATED[self.readout](texts[i], status, **common))
            else:
                pos, neg = answer_token_ids(self.backend.tokenizer, self.readout)
                p_raw, p_pos, p_neg, mass = read_distribution(logprobs[i], pos, neg)
                verdicts.append(Verdict(status=status if p_raw is not None else "parse_failure",
                                        p_raw=p_raw, format_mass=mass, p_yes=p_pos, p_no=p_neg,
                                        **common))
        return [with_defense_record(v, e.defense) for v, e in zip(verdicts, encoded, strict=True)]



def score_with_store(monitor: Monitor, samples: Sequence[Sample], store: RunStore, *,
                     chunk_size: int = 32, progress: Callable[[int], None] | None = None,
                     paced: bool = False) -> dict[str, Verdict]:
    """Score the samples the store does not have yet, committing after each chunk, and return
    the readings of all of them by transcript hash. A chunk that fails is retried one sample at a
    time; a sample that still fails is stored with status "error" (and retried on the next run).

    Chunks hold ``chunk_size`` samples; ``paced``: at most ``chunk_size``, the first one sample
    and each next sized to take about `calimon.progress.PACE_SECONDS` (`calimon.progress.paced`),
    so ``progress`` moves every few seconds and an interrupt loses only the chunk in flight."""
    from calimon.progress import paced as paced_chunks

    key = monitor.key
    by_hash = {s.transcript_hash: s for s in samples}
    todo = [by_hash[h] for h in store.missing(key, list(by_hash))]
    chunks = (paced_chunks(todo, chunk_size) if paced else
              (todo[i:i + chunk_size] for i in range(0, len(todo), chunk_size)))
    for chunk in chunks:
        store.put(key, score_chunk(monitor, chunk))
        if progress:
            progress(len(chunk))
    return store.get(key, list(by_hash))


def score_chunk(monitor: Monitor, chunk: Sequence[Sample]) -> list[Verdict]:
    """One chunk's verdicts, in order, as every engine scores it (the local loop above and each
    Ray worker): a backend fault on the batch is retried sample by sample, and a sample that
    still fails becomes an "error" verdict. A CalimonError (bad input, missing extra) is
    raised, not recorded."""
    try:
        return monitor.score(chunk)
    except CalimonError:
        raise
    except Exception:  # a backend fault on one batch: isolate it sample by sample
        out = []
        for s in chunk:
            try:
                out.extend(monitor.score([s]))
            except Exception as exc:
                out.append(Verdict(transcript_hash=s.transcript_hash, readout=monitor.readout,
                                   status="error", error=f"{type(exc).__name__}: {exc}"[:500]))
        return out
