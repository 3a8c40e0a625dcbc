"""Copy-constrained quotes from a backend: the evidence prompt asks for a JSON list of quotes
(the ``quotes`` format, ``configs/readouts/quotes.yaml``; the assistant's turn starts with
``["``), and each quote is decoded greedily under `CopyConstraint`: every token is the next
token of some run of the response's own token ids, so the quote is grounded by construction and
its character offsets are the offsets of the tokens it copied.

The model closes a quote with any token whose text starts with ``"`` (for example ``",`` or
``"]``), except the tokens that also occur in the response: those can only continue a copy.
After a quote, the turn goes on with ``", "`` and the next quote, which may not reuse the
tokens of the quotes before it; ``n_quotes`` quotes are asked for (fewer when nothing is left
to quote). Quote order is the model's: the first is the one it wrote first.

Every step is one `AllowedTokens.greedy_among` call on the prompt plus the quote so far: the
greedy token among the allowed ids over the model's full distribution (the transformers
backend takes the argmax of its log-probs, reusing the prompt's KV cache; vLLM masks the other
logits with ``allowed_token_ids`` and reuses its prefix cache). A backend without that
capability (the HTTP and chat backends, whose servers return only the top log-probs) gets a
`CapabilityError` naming the backends that have it. Readings go to the run store under their
own key (readout ``copy_quotes``, the settings in the template hash): a rerun costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from calimon.errors import InputError
from calimon.prompts import PromptTemplate, encoder_for, load_derived_format, prompt_format_of
from calimon.samples import Sample
from calimon.scoring.backends import AllowedTokens, requires
from calimon.scoring.store import MonitorKey, RunStore
from calimon.studies.spans.copy_quotes import CopyConstraint, copy_decode
from calimon.studies.spans.grounding import GroundedSpan
from calimon.verdict import Verdict

QUOTES_FORMAT = "quotes"
READOUT = "copy_quotes"
SEPARATOR = '", "'
_closing: dict[int, tuple[object, frozenset[int]]] = {}


@dataclass(frozen=True)
class CopySettings:
    """How many quotes per transcript, and each quote's length in tokens."""

    n_quotes: int = 3
    min_tokens: int = 2
    max_tokens: int = 24

    def check(self) -> None:
        """Raise InputError naming the first field out of range."""
        if self.n_quotes < 1:
            raise InputError(f"expected n_quotes >= 1, got {self.n_quotes}", field="n_quotes")
        if not 1 <= self.min_tokens <= self.max_tokens:
            raise InputError(f"expected 1 <= min_tokens <= max_tokens, got {self.min_tokens}, "
                             f"{self.max_tokens}", field="min_tokens")


def quotes_template(template: PromptTemplate) -> PromptTemplate:
    """``template`` with the ``quotes`` format (its question and assistant prefix) added."""
    fmt = load_derived_format(QUOTES_FORMAT).format_in(template)
    return template.model_copy(update={"formats": {**template.formats, QUOTES_FORMAT: fmt}})


def closing_ids(tokenizer) -> frozenset[int]:
    """The ids of tokens whose text starts with a double quote (computed once per tokenizer)."""
    cached = _closing.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    special = set(tokenizer.all_special_ids)
    out = frozenset(tid for piece, tid in tokenizer.get_vocab().items() if tid not in special
                    and tokenizer.convert_tokens_to_string([piece]).startswith('"'))
    _closing[id(tokenizer)] = (tokenizer, out)
    return out


class CopyQuoter:
    """Copy-constrained quotes of transcripts by ``backend`` under ``template`` (the evidence
    prompt), ``settings`` per transcript, transcripts cut to ``max_input_tokens``."""

    def __init__(self, backend, template: PromptTemplate, settings: CopySettings | None = None,
                 max_input_tokens: int = 2048):
        self.backend = requires(backend, AllowedTokens, needed_for="copy-constrained quotes")
        self.settings = settings or CopySettings()
        self.settings.check()
        self.template = quotes_template(template)
        reserve = self.settings.n_quotes * (self.settings.max_tokens + 4)
        self.encoder = encoder_for(backend, self.template, QUOTES_FORMAT, max_input_tokens,
                                   reserve_new_tokens=reserve)
        tok = backend.tokenizer
        self._separator = tok(SEPARATOR, add_special_tokens=False)["input_ids"]
        self._closing = closing_ids(tok)

    @property
    def key(self) -> MonitorKey:
        """The run-store key of these quotes (the settings are part of the template hash)."""
        ref = self.backend.model_ref
        decoding = {"copy": asdict(self.settings)}
        return MonitorKey(ref.name, ref.revision, self.template.name,
                          self.template.template_hash(QUOTES_FORMAT, prompt_format_of(
                              self.backend), decoding=decoding), READOUT)

    def quote(self, sample: Sample) -> Verdict:
        """The quotes of one transcript as a reading: ``evidence`` holds the quoted text,
        ``extra["spans"]`` their ``[start, end]`` character offsets in the response, in the
        order written; ``tokens`` counts the tokens the backend computed."""
        st, start = self.settings, time.perf_counter()
        enc = self.encoder.encode(sample.request, sample.response)
        resp = enc.ids[enc.response_start:enc.response_end]
        ends = self._closing - set(resp)
        prompt, taken, spans, computed = list(enc.ids), set(), [], 0
        for _ in range(st.n_quotes):
            c = CopyConstraint(resp, enc.response_token_offsets, ends, st.min_tokens,
                               st.max_tokens, blocked=taken)
            if not c.allowed() - ends:
                break  # everything quotable is taken
            base = len(prompt) - 1

            def choose(quoted, allowed, base=base, prompt=prompt):
                return self.backend.greedy_among([prompt + quoted], [allowed], prefix_len=base)[0]

            q = copy_decode(choose, c)
            computed += len(prompt) + len(q.ids)
            spans.append([q.char_start, q.char_end])
            taken.update(range(q.start, q.end))
            prompt = prompt + list(q.ids) + self._separator
        trunc = enc.truncation.__dict__ if enc.truncation else None
        return Verdict(transcript_hash=sample.transcript_hash, readout=READOUT,
                       status="truncated" if trunc else "ok",
                       evidence=tuple(sample.response[a:b] for a, b in spans),
                       tokens=computed, seconds=time.perf_counter() - start, truncation=trunc,
                       extra={"spans": spans, "closing_ids": len(ends)})

    def quote_all(self, samples: Sequence[Sample], store: RunStore, tick=None
                  ) -> dict[str, Verdict]:
        """The quotes of every transcript, read from ``store`` where present; new readings are
        written as they come (an interrupted run keeps what it did)."""
        key = self.key
        todo = set(store.missing(key, [s.transcript_hash for s in samples]))
        for s in samples:
            if s.transcript_hash in todo:
                store.put(key, [self.quote(s)])
                todo.discard(s.transcript_hash)
                if tick is not None:
                    tick(1)
        return store.get(key, [s.transcript_hash for s in samples])


def copied_spans(reading: Verdict | None, response: str) -> list[GroundedSpan]:
    """The quotes of a `CopyQuoter` reading as grounded spans (status ``copied``, in the order
    written); none for a missing reading."""
    if reading is None:
        return []
    out = []
    for a, b in reading.extra.get("spans", []):
        if not 0 <= a < b <= len(response):
            raise InputError(f"copied span [{a}, {b}) lies outside the response "
                             f"({len(response)} characters)", field="spans")
        out.append(GroundedSpan(response[a:b], a, b, "copied", 1.0))
    return out


__all__ = ["CopyQuoter", "CopySettings", "READOUT", "closing_ids", "copied_spans",
           "quotes_template"]
