"""Extract hidden-state features once per sample and keep them in a cache; train heads from it.

One pass per sample gives, from the same prefill: pooled states of EVERY layer (0..num_layers)
for every pooling, the verdict readout (P(Yes) of the prompt's ``verdict`` format), and
optionally per-token states of the response at a few ``token_layers``.

Cache layout: ``<cache>/<model>/<key>/shard-*.safetensors`` where ``key`` hashes the model
revision, the template hash of the prompt's verdict format and ``max_input_tokens``. A shard
holds a batch of samples keyed by transcript hash (so a changed or grown benchmark reuses every
row it already has) and records its ``token_layers``; a row serves a request whose
token layers it covers. Per-token states are stored as float16, pooled states as float32.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calimon.data.paths import calimon_home
from calimon.errors import InputError
from calimon.numerics.readouts import answer_token_ids, read_distribution
from calimon.prompts import PromptEncoder, PromptTemplate, encoder_for
from calimon.samples import Sample
from calimon.scoring.probes.capture import POOLINGS, CaptureSpec
from calimon.scoring.probes.labels import token_labels

FEATURES_ENV = "CALIMON_FEATURES_DIR"
READOUT = "verdict"  # heads read the prompt encoded for the verdict readout


def features_dir() -> Path:
    """The feature cache root: $CALIMON_FEATURES_DIR, else $CALIMON_HOME/features."""
    return Path(os.environ.get(FEATURES_ENV) or calimon_home() / "features")


def cache_key(model_ref, prompt: PromptTemplate, max_input_tokens: int) -> str:
    """The cache folder's key: a short hash of the model's name and revision, the verdict
    template hash (with the model config's ``prompt_format``) and ``max_input_tokens``."""
    fmt = getattr(getattr(model_ref, "config", None), "prompt_format", "chat")
    payload = json.dumps([model_ref.name, model_ref.revision, prompt.template_hash(READOUT, fmt),
                          int(max_input_tokens), 1])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class FeatureSet:
    """Features of ``samples`` (in order). ``pooled``: (n, len(POOLINGS), num_layers + 1,
    hidden) float32; ``verdict``: (n, 4) = p_raw (NaN when unreadable), p_yes, p_no,
    format_mass; ``tokens[i]``: (response tokens, len(token_layers), hidden) float16;
    ``offsets[i]``: (response tokens, 2) character offsets into the response."""

    samples: tuple[Sample, ...]
    pooled: np.ndarray = field(repr=False)
    verdict: np.ndarray = field(repr=False)
    n_tokens: np.ndarray = field(repr=False)
    truncated: np.ndarray = field(repr=False)
    token_layers: tuple[int, ...] = ()
    tokens: tuple[np.ndarray, ...] = field(default=(), repr=False)
    offsets: tuple[np.ndarray, ...] = field(default=(), repr=False)

    @property
    def num_layers(self) -> int:
        """Decoder blocks of the model (pooled layers run 0..num_layers)."""
        return self.pooled.shape[2] - 1

    @property
    def hidden_size(self) -> int:
        """Width of one hidden state."""
        return self.pooled.shape[3]

    def X(self, layer: int, pooling: str) -> np.ndarray:
        """(n, hidden) pooled states of one layer and pooling; raises InputError for an unknown
        pooling or a layer out of range."""
        if pooling not in POOLINGS:
            raise InputError(f"expected one of {list(POOLINGS)}, got {pooling!r}",
                             field="pooling")
        if not 0 <= layer <= self.num_layers:
            raise InputError(f"expected a layer in 0..{self.num_layers}, got {layer}",
                             field="layer")
        return self.pooled[:, POOLINGS.index(pooling), layer]

    @property
    def y(self) -> np.ndarray:
        """The samples' labels as a bool array (no label counts as benign)."""
        return np.array([bool(s.label) for s in self.samples])

    @property
    def groups(self) -> np.ndarray:
        """The samples' pair ids (cross-validation groups)."""
        return np.array([s.pair_id for s in self.samples], dtype=object)

    def column(self, name: str) -> np.ndarray:
        """One Sample field of every sample, as an object array."""
        return np.array([getattr(s, name) for s in self.samples], dtype=object)

    def token_states(self, i: int, layer: int) -> np.ndarray:
        """(response tokens, hidden) states of sample ``i`` at ``layer``; raises InputError when
        that layer's per-token states were not extracted."""
        if layer not in self.token_layers:
            raise InputError(f"no per-token states at layer {layer}; extracted: "
                             f"{list(self.token_layers)}", field="layer")
        return self.tokens[i][:, self.token_layers.index(layer)]

    def token_labels(self, i: int) -> np.ndarray:
        """Per-token labels of sample ``i`` from its gold spans
        (`calimon.scoring.probes.labels.token_labels`)."""
        s = self.samples[i]
        return token_labels(self.offsets[i], s.gold_spans, s.label)

    def concat(self, other: FeatureSet) -> FeatureSet:
        """This set's rows, then ``other``'s (features of the same model, layers and
        per-token layers); raises InputError when their shapes differ."""
        if (other.pooled.shape[1:] != self.pooled.shape[1:]
                or other.token_layers != self.token_layers
                or bool(other.tokens) != bool(self.tokens)):
            raise InputError("expected features of the same model, layers and per-token "
                             f"layers, got pooled {self.pooled.shape[1:]} and "
                             f"{other.pooled.shape[1:]}", field="features")
        return FeatureSet(self.samples + other.samples,
                          np.concatenate([self.pooled, other.pooled]),
                          np.concatenate([self.verdict, other.verdict]),
                          np.concatenate([self.n_tokens, other.n_tokens]),
                          np.concatenate([self.truncated, other.truncated]),
                          self.token_layers, self.tokens + other.tokens,
                          self.offsets + other.offsets)

    def subset(self, mask) -> FeatureSet:
        """The rows where boolean ``mask`` is True (or the rows at integer indices)."""
        arr = np.asarray(mask)
        idx = np.flatnonzero(arr) if arr.dtype == bool else arr.astype(np.int64)
        pick = [int(i) for i in idx]
        return FeatureSet(tuple(self.samples[i] for i in pick), self.pooled[idx],
                          self.verdict[idx], self.n_tokens[idx], self.truncated[idx],
                          self.token_layers,
                          tuple(self.tokens[i] for i in pick) if self.tokens else (),
                          tuple(self.offsets[i] for i in pick) if self.offsets else ())


def _encode_all(encoder: PromptEncoder, samples: Sequence[Sample]):
    return [encoder.encode(s.request, s.response) for s in samples]


def extract_rows(backend, encoder: PromptEncoder, samples: Sequence[Sample],
                 token_layers: Sequence[int] = ()) -> dict[str, np.ndarray]:
    """One capture pass over ``samples``: the arrays of one cache shard."""
    enc = _encode_all(encoder, samples)
    spec = CaptureSpec(layers=tuple(range(backend.num_layers + 1)), pooling=POOLINGS,
                       token_layers=tuple(token_layers))
    got = backend.capture([e.ids for e in enc], encoder.prefix_len, spec,
                          [(e.response_start, e.response_end) for e in enc])
    pos, neg = answer_token_ids(backend.tokenizer, READOUT)
    verdict = np.full((len(samples), 4), np.nan)
    for i, lp in enumerate(got.logprobs):
        p_raw, p_yes, p_no, mass = read_distribution(lp, pos, neg)
        verdict[i] = (np.nan if p_raw is None else p_raw, p_yes, p_no, mass)
    rows = {"pooled": got.pooled.astype(np.float32), "verdict": verdict,
            "n_tokens": np.array([len(e.ids) for e in enc], dtype=np.int64),
            "truncated": np.array([e.truncation is not None for e in enc], dtype=np.int8)}
    if token_layers:
        rows["tokens"] = np.concatenate(got.tokens).astype(np.float16)
        rows["token_count"] = np.array([t.shape[0] for t in got.tokens], dtype=np.int64)
        rows["token_offsets"] = np.concatenate(
            [np.asarray(e.response_token_offsets, dtype=np.int32).reshape(-1, 2) for e in enc])
    return rows


class FeatureCache:
    """The shard folder of one (model revision, prompt, max_input_tokens)."""

    def __init__(self, model_ref, prompt: PromptTemplate, max_input_tokens: int,
                 root: str | Path | None = None):
        self.folder = Path(root or features_dir()) / model_ref.name / \
            cache_key(model_ref, prompt, max_input_tokens)
        self.meta = {"model": model_ref.name, "revision": model_ref.revision,
                     "prompt": prompt.name, "template_hash": prompt.template_hash(READOUT),
                     "max_input_tokens": int(max_input_tokens)}

    def _index(self) -> dict[str, tuple[Path, int, tuple[int, ...]]]:
        from safetensors import safe_open

        index: dict[str, tuple[Path, int, tuple[int, ...]]] = {}
        for path in sorted(self.folder.glob("shard-*.safetensors")):
            with safe_open(str(path), "np") as fh:
                meta = fh.metadata()
            layers = tuple(json.loads(meta["token_layers"]))
            for row, h in enumerate(json.loads(meta["hashes"])):
                old = index.get(h)
                if old is None or len(layers) > len(old[2]):
                    index[h] = (path, row, layers)
        return index

    def missing(self, samples: Sequence[Sample], token_layers: Sequence[int] = ()) -> list[Sample]:
        """The samples (one per transcript) without a cached row covering ``token_layers``."""
        index, want = self._index(), set(token_layers)
        seen: set[str] = set()
        out = []
        for s in samples:
            h = s.transcript_hash
            if h not in seen and (h not in index or not want <= set(index[h][2])):
                out.append(s)
            seen.add(h)
        return out

    def write(self, samples: Sequence[Sample], rows: dict[str, np.ndarray],
              token_layers: Sequence[int]) -> Path:
        """Write one shard of ``rows`` (arrays keyed by name, one row per sample) and return its
        path; the write is atomic."""
        from safetensors.numpy import save_file

        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "cache.json").write_text(json.dumps(self.meta, indent=1) + "\n")
        hashes = [s.transcript_hash for s in samples]
        name = hashlib.sha256("".join(hashes).encode()).hexdigest()[:16]
        path = self.folder / f"shard-{name}-{len(list(token_layers))}.safetensors"
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        save_file({k: np.ascontiguousarray(v) for k, v in rows.items()}, str(tmp),
                  metadata={"hashes": json.dumps(hashes),
                            "token_layers": json.dumps(list(token_layers))})
        tmp.replace(path)
        return path

    def load(self, samples: Sequence[Sample], token_layers: Sequence[int] = ()) -> FeatureSet:
        """The cached features of ``samples`` (per-token states at ``token_layers`` too); raises
        InputError when a sample has no cached row."""
        from safetensors import safe_open

        index, token_layers = self._index(), tuple(token_layers)
        lacking = [s.id for s in samples if s.transcript_hash not in index]
        if lacking:
            raise InputError(f"{len(lacking)} sample(s) have no cached features (first: "
                             f"{lacking[0]}); run extract_features first", field="samples")
        by_path: dict[Path, list[int]] = {}
        for i, s in enumerate(samples):
            by_path.setdefault(index[s.transcript_hash][0], []).append(i)
        n = len(samples)
        parts: dict[str, list] = {k: [None] * n for k in
                                  ("pooled", "verdict", "n_tokens", "truncated")}
        toks: list = [None] * n
        offs: list = [None] * n
        for path, members in by_path.items():
            with safe_open(str(path), "np") as fh:
                data = {k: fh.get_tensor(k) for k in fh.keys()}
                layers = tuple(json.loads(fh.metadata()["token_layers"]))
            starts = np.r_[0, np.cumsum(data["token_count"])] if "token_count" in data else None
            for i in members:
                row = index[samples[i].transcript_hash][1]
                for k in parts:
                    parts[k][i] = data[k][row]
                if token_layers:
                    a, b = starts[row], starts[row + 1]
                    cols = [layers.index(k) for k in token_layers]
                    toks[i] = data["tokens"][a:b][:, cols]
                    offs[i] = data["token_offsets"][a:b]
        return FeatureSet(tuple(samples), np.stack(parts["pooled"]), np.stack(parts["verdict"]),
                          np.array(parts["n_tokens"]), np.array(parts["truncated"]),
                          token_layers, tuple(toks) if token_layers else (),
                          tuple(offs) if token_layers else ())


def extract_features(backend, prompt: PromptTemplate, samples: Sequence[Sample], *,
                     max_input_tokens: int = 1024, token_layers: Sequence[int] = (),
                     chunk_size: int = 32, cache_root: str | Path | None = None,
                     progress: Callable[[int], None] | None = None) -> FeatureSet:
    """Features of ``samples``: computed for the ones the cache lacks (one capture pass per
    chunk, each chunk written as a shard at once, so an interrupted run resumes), then loaded."""
    if not samples:
        raise InputError("expected at least one sample", field="samples")
    cache = FeatureCache(backend.model_ref, prompt, max_input_tokens, cache_root)
    encoder = encoder_for(backend, prompt, READOUT, max_input_tokens)
    todo = cache.missing(samples, token_layers)
    for i in range(0, len(todo), chunk_size):
        chunk = todo[i:i + chunk_size]
        cache.write(chunk, extract_rows(backend, encoder, chunk, token_layers), token_layers)
        if progress:
            progress(len(chunk))
    return cache.load(samples, token_layers)
