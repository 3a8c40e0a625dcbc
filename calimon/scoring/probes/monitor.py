"""`ProbeMonitor`: a trained head read from the scoring pass, with the `Monitor` interface.

The prompt is encoded exactly as for the ``verdict`` readout (the head was trained on that pass),
so one forward pass yields both the verdict P(Yes) and the head's hidden states:
:meth:`ProbeMonitor.score_with_verdict` returns both readings; :meth:`ProbeMonitor.score` keeps
the verdict figures of the same pass in ``Verdict.extra["verdict"]``. A token head also keeps its
spans (``extra["spans"]``) and per-token scores (``extra["token_scores"]``, which a curve run
writes to ``token_scores.jsonl`` for the report), and its evidence in a reader's units
(``extra["segments"]``: ``[start, end, score, None]`` of the top segments, strongest first,
`calimon.numerics.reader_segments`). The reading's ``evidence`` quotes those segments, strongest
first. Their precision is applied where a reading is read (`segment_evidence`), from the token
head's segment precision map (``<token head>.segments.json`` beside its card,
``precision_map``): a refitted map changes no stored reading.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from calimon.numerics.readouts import answer_token_ids, read_distribution
from calimon.prompts import PromptEncoder, PromptTemplate, encoder_for, prompt_format_of
from calimon.samples import Sample
from calimon.scoring.probes.artifacts import find_head_card, head_provenance, load_head
from calimon.scoring.probes.bundle import find_bundle, load_bundle
from calimon.scoring.probes.capture import CaptureSpec
from calimon.scoring.probes.features import READOUT
from calimon.scoring.probes.labels import span_offsets
from calimon.scoring.store import MonitorKey
from calimon.verdict import Verdict


def _model_hidden_size(model_ref) -> int | None:
    try:
        cfg = json.loads((model_ref.path / "config.json").read_text())
        return int(cfg["hidden_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def token_scores_record(offsets, probs) -> dict[str, list]:
    """A token head's per-token scores as ``Verdict.extra["token_scores"]``: ``{"offsets":
    [[start, end], ...], "scores": [...]}``, offsets into the response (``[-1, -1]`` for a
    marker token), scores rounded to 6 decimals; the format of ``token_scores.jsonl``."""
    return {"offsets": [[int(a), int(b)] for a, b in offsets],
            "scores": [round(float(p), 6) for p in probs]}


class ProbeMonitor:
    """``head``: a head or bundle name (looked up under ``heads/<model>/``) or a card path. A
    bundle (`calimon.scoring.probes.bundle`) scores with its sequence head and takes its spans from its
    token head, both read from the same pass; a token head alone does both. Transcripts are read
    up to the model's own input limit unless ``max_input_tokens`` chooses a smaller one (the
    limit the head was trained at is ``trained_max_input_tokens``).

    The head (or bundle) must have been made for this model, revision and pass (prompt,
    template hash, defenses): a mismatch is refused with one line naming both sides
    (`calimon.provenance.meet`) unless ``force``; what differed is then ``forced`` (and in
    every reading's ``extra``). A hidden size that differs is never let through."""

    def __init__(self, backend, prompt: PromptTemplate, head: str,
                 max_input_tokens: int | None = None, heads_root=None, force: bool = False):
        self.backend = backend
        self.prompt = prompt
        ref = backend.model_ref
        hidden = _model_hidden_size(ref)
        found = find_bundle(head, ref.name, heads_root)
        self.bundle = None if found is None else load_bundle(found, model_ref=ref,
                                                             hidden_size=hidden,
                                                             check_model=False)
        if self.bundle is not None:
            self.head, self.card = self.bundle.sequence, self.bundle.sequence_card
            self.span_head = self.bundle.token
            self.readout = f"probe:{self.bundle.card.name}"
            what, path = "probe bundle", found
        else:
            self.head, self.card = load_head(head, model_ref=ref, hidden_size=hidden,
                                             root=heads_root, check_model=False)
            self.span_head = self.head if self.head.kind == "token" else None
            self.readout = f"probe:{self.card.name}"
            what, path = "probe head", find_head_card(head, ref, heads_root)
        self.forced = self._meet(what, str(path), force)
        self.precision_map = self._precision_map(found, path)
        trained = self.card.prompt
        # the model's own limit unless a smaller one is chosen: a head reads any length of
        # its model's pass, and cutting at the training limit hides the end of long transcripts
        self.max_input_tokens = max_input_tokens or ref.config.max_input_tokens
        self.trained_max_input_tokens = trained.max_input_tokens
        self._encoder: PromptEncoder | None = None

    def _precision_map(self, bundle_card, head_card):
        """The token head's segment precision map, when one lies beside its card."""
        from calimon.calibration.segment_precision import (
            load_precision_map,
            precision_map_path,
        )

        if self.span_head is None:
            return None
        card = (Path(bundle_card).parent / f"{self.bundle.card.token_head}.card.yaml"
                if self.bundle is not None else Path(head_card))
        where = precision_map_path(card)
        return load_precision_map(where) if where.is_file() else None

    def _meet(self, what: str, path: str, force: bool) -> list[str]:
        """`calimon.provenance.meet` of the head's card and this monitor's pass."""
        from calimon.provenance import meet

        ref = self.backend.model_ref
        mine = {"model": ref.name, "model_revision": ref.revision, "prompt": self.prompt.name,
                "template_hash": self.prompt.template_hash(READOUT), "readout": READOUT,
                "defenses": list(self.prompt.defenses or ())}
        return meet(what, head_provenance(self.card), mine, force=force, path=path)

    @property
    def key(self) -> MonitorKey:
        """The run-store key of the head's readings: the prompt's verdict template hash, the
        weights' sha256, the input limit and the head's aggregation and span threshold, hashed
        together."""
        ref = self.backend.model_ref
        spans = self.span_head or self.head
        weights = self.bundle.weights_sha256 if self.bundle else self.card.weights_sha256
        payload = json.dumps([self.prompt.template_hash(READOUT, prompt_format_of(self.backend)),
                              weights, self.max_input_tokens, spans.aggregate,
                              spans.span_threshold])
        return MonitorKey(ref.name, ref.revision, self.prompt.name,
                          hashlib.sha256(payload.encode()).hexdigest()[:16], self.readout)

    @property
    def encoder(self) -> PromptEncoder:
        """The prompt encoder of the verdict pass the head reads, made on first use."""
        if self._encoder is None:
            self._encoder = encoder_for(self.backend, self.prompt, READOUT,
                                        self.max_input_tokens)
        return self._encoder

    @property
    def capture_spec(self) -> CaptureSpec:
        """What the pass captures: the sequence head's pooled layers, and the per-token states
        of the layers that an attention head or the token head read."""
        pooled = not self.head.reads_tokens
        return CaptureSpec(layers=self.head.feature_layers if pooled else (),
                           pooling=(self.head.pooling,) if pooled else ("last",),
                           token_layers=tuple(sorted({h.layer for h in (self.head,
                                                                        self.span_head)
                                                      if h is not None and h.reads_tokens})))

    def score(self, samples: Sequence[Sample]) -> list[Verdict]:
        """The head's readings of ``samples``, in order (see `score_with_verdict`)."""
        return self.score_with_verdict(samples)[1]

    def score_with_verdict(self, samples: Sequence[Sample]
                           ) -> tuple[list[Verdict], list[Verdict]]:
        """(verdict-readout readings, head readings) of ``samples`` from ONE forward pass."""
        encoded = [self.encoder.encode(s.request, s.response) for s in samples]
        start = time.perf_counter()
        got = self.backend.capture([e.ids for e in encoded], self.encoder.prefix_len,
                                   self.capture_spec,
                                   [(e.response_start, e.response_end) for e in encoded])
        per_sample = (time.perf_counter() - start) / max(len(samples), 1)
        pos, neg = answer_token_ids(self.backend.tokenizer, READOUT)
        verdicts, figures = [], []
        for i, (s, e) in enumerate(zip(samples, encoded, strict=True)):
            trunc = e.truncation.__dict__ if e.truncation else None
            p_raw, p_yes, p_no, mass = read_distribution(got.logprobs[i], pos, neg)
            figures.append({"p_raw": p_raw, "p_yes": p_yes, "p_no": p_no, "format_mass": mass})
            verdicts.append(Verdict(readout=READOUT, status=("truncated" if trunc else "ok")
                                    if p_raw is not None else "parse_failure", p_raw=p_raw,
                                    format_mass=mass, p_yes=p_yes, p_no=p_no,
                                    transcript_hash=s.transcript_hash, tokens=len(e.ids),
                                    seconds=per_sample, truncation=trunc))
        return verdicts, self.head_readings(samples, encoded, got, per_sample, figures)

    def head_readings(self, samples: Sequence[Sample], encoded, got, seconds: float,
                      figures: Sequence[dict] | None = None) -> list[Verdict]:
        """The head's readings of ``samples`` from their prompts (``encoded``) and what a pass
        captured of them (``got``, a `Captured` of `capture_spec`); ``figures``: the verdict
        readout of the same pass per sample, kept in ``extra["verdict"]`` (None: the pass
        stopped before the model's last layer and read none)."""
        spec = got.spec

        def states(head) -> list[np.ndarray]:
            col = spec.token_layers.index(head.layer)
            return [t[:, col] for t in got.tokens]

        token_p = ([self.span_head.predict_proba(t) for t in states(self.span_head)]
                   if self.span_head else None)
        if self.head.estimator == "attention":
            p_head = self.head.score_states(states(self.head))
        elif self.head.kind == "sequence":
            p_head = self.head.predict_proba(self.head.pooled_features(got.features))
        else:
            p_head = np.array([self.head.sequence_score(p) for p in token_p])
        heads = []
        for i, (s, e) in enumerate(zip(samples, encoded, strict=True)):
            trunc = e.truncation.__dict__ if e.truncation else None
            common = dict(transcript_hash=s.transcript_hash, tokens=len(e.ids),
                          seconds=seconds, truncation=trunc)
            extra = {"head": self.card.name, "kind": self.head.kind, "layer": self.head.layer,
                     "verdict": None if figures is None else figures[i]}
            if self.bundle is not None:
                extra["bundle"] = self.bundle.card.name
            if self.forced:
                extra["forced"] = list(self.forced)
            evidence: tuple[str, ...] = ()
            if token_p is not None:
                spans = self._spans(s, e, token_p[i])
                extra["spans"] = [[sp.start, sp.end, sp.score] for sp in spans]
                extra["token_scores"] = token_scores_record(e.response_token_offsets, token_p[i])
                units = self._segments(s, e, token_p[i])
                extra["segments"] = [u.to_list() for u in units]
                evidence = tuple(s.response[u.start:u.end] for u in units)
            score = float(p_head[i])
            if not np.isfinite(score):  # a token/attention head on an empty response
                heads.append(Verdict(readout=self.readout, status="parse_failure",
                                     error="no response tokens to score", extra=extra, **common))
                continue
            heads.append(Verdict(readout=self.readout, status="truncated" if trunc else "ok",
                                 p_raw=score, evidence=evidence, extra=extra, **common))
        return heads

    def _segments(self, sample: Sample, enc, probs: np.ndarray):
        """The top segments of the response, strongest first."""
        from calimon.calibration.segment_precision import TOP
        from calimon.numerics.reader_segments import rank_units, reader_units, score_units

        units = reader_units(sample.response, sample.task,
                             (sample.meta or {}).get("messages"))
        return rank_units(score_units(units, span_offsets(enc.response_token_offsets), probs),
                          TOP)

    def _spans(self, sample: Sample, enc, probs: np.ndarray):
        from calimon.numerics.span_metrics import spans_from_token_scores

        return spans_from_token_scores(span_offsets(enc.response_token_offsets), probs,
                                       self.span_head.span_threshold,
                                       text=sample.response)


def segment_evidence(extra: dict, monitor=None) -> list[list]:
    """A reading's segments (``extra["segments"]``, strongest first) as ``[start, end, score,
    precision]``, the precision from ``monitor``'s segment precision map (None without one)."""
    segments = [list(x) for x in (extra or {}).get("segments") or ()]
    stored = getattr(monitor, "precision_map", None)
    if stored is not None and segments:
        got = np.clip(stored.predict(np.array([x[2] for x in segments], dtype=float)), 0, 1)
        for x, p in zip(segments, got, strict=True):
            x[3] = round(float(p), 6)
    return segments
