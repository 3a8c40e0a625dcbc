"""transformers backend (default): CPU or GPU, batched, logits only where they are read.

All prompts of one template share their first `prefix_len` tokens (system prompt and
instructions); that prefix is run once and its KV cache is reused by every batch.

`capture(...)` runs the same prefill as `next_token_logprobs` and also returns hidden states of
chosen layers (pooled over each prompt's response tokens, and optionally per token), so a
verdict and a probe head are read from one forward pass. It is a separate method because it
returns more than `next_token_logprobs` does (one return type per function).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import numpy as np

from calimon.errors import BackendError
from calimon.models import ResolvedModel
from calimon.scoring.backends import gpu_defaults
from calimon.scoring.backends.base import (
    AllowedTokens,
    BackendBase,
    Constrained,
    HiddenStates,
    LocalWeights,
)
from calimon.scoring.backends.gpu_defaults import reuse_prefix
from calimon.scoring.backends.loading import LazyTokenizer, causal_lm_class, stop_token_ids
from calimon.scoring.backends.prefix_view import _read_only_prefix
from calimon.scoring.backends.threads import ThreadGovernor, apply_threads


class TransformersBackend(LazyTokenizer, BackendBase):
    """A transformers causal LM in this process; options: `TransformersOptions`. Declares the
    hidden-states capability (`capture`), local weights (`model`) and constrained decoding
    (`calimon.scoring.backends.constrained`)."""

    name = "transformers"
    capabilities = frozenset({HiddenStates, LocalWeights, Constrained, AllowedTokens})

    def __init__(self, model: ResolvedModel, device: str = "auto", batch_tokens: int | None = None,
                 max_batch_size: int | None = None, threads: int | None = None,
                 generate_batch_size: int = 16, attention: str = "causal", packing: bool = True,
                 kernels: str = "auto", varlen: bool | None = None):
        self.model_ref = model
        # scoring passes: "causal"/"lower_right" run without an explicit mask where the model
        # allows it (`calimon.scoring.backends.layout_attention`), "mask" the explicit-mask path;
        # ``packing`` lays a batch's prompts of different lengths in one sequence
        self.attention = attention
        self.packing = packing
        # on a GPU: fused kernels (calimon.scoring.backends.fused) and one varlen attention call
        # per pass; "auto"/None take calimon.scoring.backends.gpu_defaults' measured choice
        self.kernels = kernels
        self.varlen = varlen
        self.kernels_used: str | None = None  # what the model runs with, once it has run
        self.generate_batch_size = generate_batch_size
        self.device = device
        self._batch_tokens = batch_tokens
        self._max_batch_size = max_batch_size
        self.threads = threads
        self.threads_used: int | None = None  # torch threads now (CPU only)
        self._governor = None  # re-reads the free cores between calls when threads is None
        self.forward_calls = 0  # batches run through the model; the resumability test reads it
        self._model = None
        self._tokenizer = None
        self._prefix_cache: dict[tuple[int, ...], object] = {}

    @classmethod
    def from_loaded(cls, model_ref: ResolvedModel, model, tokenizer, **kwargs
                    ) -> TransformersBackend:
        """A backend around a model already in memory (e.g. a merged LoRA fine-tune);
        `model_ref` should carry a revision that identifies those weights."""
        backend = cls(model_ref, **kwargs)
        backend._model = model.eval()
        backend._tokenizer = tokenizer
        backend._device = str(next(model.parameters()).device)
        return backend

    # -- loading -----------------------------------------------------------------------------
    @property
    def model(self):
        """The causal LM on the resolved device, loaded on first use (``dtype`` "auto": bfloat16
        on CUDA, float32 elsewhere)."""
        if self._model is None:
            import torch

            dev = self._resolved_device()
            if self.threads:
                self.threads_used = apply_threads(self.threads)
            elif dev == "cpu":  # default: the free cores, re-read as the load changes
                self._governor = ThreadGovernor()
                self.threads_used = self._governor.threads
            dtype = self.model_ref.config.dtype
            if dtype == "auto":
                dtype = "bfloat16" if dev.startswith("cuda") else "float32"
            self._model = causal_lm_class(self.model_ref).from_pretrained(
                str(self.model_ref.path), dtype=getattr(torch, dtype)).to(dev).eval()
            self._device = dev
        return self._model

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory (the next call loads none)."""
        return self._model is not None

    @property
    def max_batch_size(self) -> int:
        """Prompts per forward pass; default 1 on CPU, `gpu_defaults.GPU_MAX_BATCH` on a GPU.
        On CPU one prefill of a few hundred tokens already keeps the cores busy: padded batches
        measured slower and a packed batch only as fast (benchmarks/results/perf.md)."""
        if self._max_batch_size is not None:
            return self._max_batch_size
        return gpu_defaults.max_batch_size(self._resolved_device())

    @max_batch_size.setter
    def max_batch_size(self, value: int | None) -> None:
        """Set the prompts per forward pass; None restores the device default."""
        self._max_batch_size = value

    @property
    def batch_tokens(self) -> int:
        """Padded prompt tokens per forward pass; default `gpu_defaults.batch_tokens` (8,192
        on CPU; on a GPU the measured budget, within the free memory)."""
        if self._batch_tokens is not None:
            return self._batch_tokens
        return gpu_defaults.batch_tokens(self._resolved_device(), self._model)

    @batch_tokens.setter
    def batch_tokens(self, value: int | None) -> None:
        """Set the padded tokens per forward pass; None restores the device default."""
        self._batch_tokens = value

    @property
    def use_varlen(self) -> bool:
        """Whether this backend's scoring passes take the varlen attention call."""
        return gpu_defaults.varlen(self.varlen, self._resolved_device())

    def _fuse(self, model) -> None:
        """Fuse the model's kernels as `kernels` says, once per backend (a model shared with
        another backend is re-fused to this one's choice)."""
        if self.kernels_used is None:
            from calimon.scoring.backends.fused import fuse

            self.kernels_used = fuse(model, gpu_defaults.kernels(self.kernels,
                                                                 self._resolved_device()))
    def _resolved_device(self) -> str:
        if self._model is not None:
            return self._device
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def vocab_size(self) -> int:
        """Rows of the model's output embedding (may exceed the tokenizer's length)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    # -- scoring -----------------------------------------------------------------------------
    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], prefix_len: int = 0
                            ) -> np.ndarray:
        """Log-probabilities of the next token after each prompt, shape (n, vocab), float32.
        `prefix_len` > 0 promises that every prompt starts with the same `prefix_len` tokens."""
        out = np.empty((len(prompts), self.vocab_size), dtype=np.float32)
        self._govern()
        for idx in self._batches(prompts):
            batch = [prompts[i] for i in idx]
            out[idx] = self._forward_last(batch, self._prefix_for(batch, prefix_len))
        return out

    def _prefix_for(self, batch: Sequence[Sequence[int]], prefix_len: int) -> int:
        """The prefix this batch reuses from the KV cache: `prefix_len`, or 0 where recomputing
        it is cheaper (`reuse_prefix`)."""
        device = getattr(self, "_device", None) or self._resolved_device()
        return prefix_len if reuse_prefix(device, prefix_len, [len(p) for p in batch]) else 0

    def greedy_among(self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int]],
                     prefix_len: int = 0) -> list[int]:
        """Per prompt, the most likely next token among its ``allowed`` ids (the full
        distribution is computed here, so this is an exact argmax)."""
        lp = self.next_token_logprobs(prompts, prefix_len)
        out = []
        for row, ids in zip(lp, allowed, strict=True):
            ids = np.asarray(list(ids), dtype=np.int64)
            if ids.size == 0:
                raise BackendError("no allowed token to choose from")
            out.append(int(ids[np.argmax(row[ids])]))
        return out

    def capture(self, prompts: Sequence[Sequence[int]], prefix_len: int, spec,
                spans: Sequence[tuple[int, int]]):
        """Next-token log-probs plus hidden states, from the same (prefix-reusing) pass.

        `spec` is a `calimon.scoring.backends.capture.CaptureSpec`; `spans[i]` = (start, end) token
        indices of prompt i's response (`EncodedPrompt.response_start/response_end`), which must lie
        after the shared prefix. Returns a `calimon.scoring.backends.capture.Captured`."""
        from calimon.scoring.backends.capture import Captured, check_capture_args

        check_capture_args(prompts, prefix_len, spec, spans, self.num_layers)
        self._govern()
        n, hidden = len(prompts), self.hidden_size
        logprobs = np.empty((n, self.vocab_size), dtype=np.float32)
        pooled = np.empty((n, len(spec.pooling), len(spec.layers), hidden), dtype=np.float32)
        tokens: list[np.ndarray] = [np.empty((0, len(spec.token_layers), hidden), np.float32)] * n
        for idx in self._batches(prompts):
            batch = [prompts[i] for i in idx]
            reused = self._prefix_for(batch, prefix_len)
            rel = [(spans[i][0] - reused, spans[i][1] - reused) for i in idx]
            lp, got = self._forward_last(batch, reused, capture=(spec, rel))
            logprobs[idx] = lp
            if spec.layers:
                pooled[idx] = got["pooled"]
            if spec.token_layers:
                for row, i in enumerate(idx):
                    tokens[i] = got["tokens"][row]
        return Captured(logprobs=logprobs, pooled=pooled, tokens=tokens, spec=spec)

    def _govern(self) -> None:
        if self._governor is not None:
            self.threads_used = self._governor.update()

    @property
    def num_layers(self) -> int:
        """Decoder blocks of the loaded model."""
        return len(self._decoder_layers())

    @property
    def hidden_size(self) -> int:
        """Width of the model's input embeddings (the residual stream)."""
        return int(self.model.get_input_embeddings().weight.shape[1])

    def _decoder_layers(self):
        inner = getattr(self.model, "model", self.model)
        layers = getattr(inner, "layers", None)
        if layers is None:
            raise BackendError(f"cannot find the decoder layers of {type(self.model).__name__} "
                               "(expected model.model.layers) to capture hidden states from")
        return layers

    def _batches(self, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
        """Group prompts of similar length so padding stays small."""
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        max_rows = self.max_batch_size  # resolves the device: once per call, not per prompt
        batches, cur, cur_max = [], [], 0
        for i in order:
            n = len(prompts[i])
            new_max = max(cur_max, n)
            if cur and (new_max * (len(cur) + 1) > self.batch_tokens
                        or len(cur) >= max_rows):
                batches.append(cur)
                cur, new_max = [], n
            cur.append(i)
            cur_max = new_max
        if cur:
            batches.append(cur)
        return batches

    def _prefix_kv(self, prefix: tuple[int, ...]):
        import torch

        if prefix not in self._prefix_cache:
            ids = torch.tensor([list(prefix)], device=self._device)
            with torch.inference_mode():
                out = self.model.model(input_ids=ids, use_cache=True)
            self._prefix_cache = {prefix: out.past_key_values}  # keep only the latest template
        return self._prefix_cache[prefix]

    def _forward_last(self, batch: list[Sequence[int]], prefix_len: int, capture=None):
        """Log-probs at each prompt's last position; with `capture=(spec, spans relative to the
        prefix)` also (log-probs, {"pooled", "tokens"}) from hooks on the chosen layers."""
        import torch

        model = self.model
        self._fuse(model)
        self.forward_calls += 1
        prefix = tuple(batch[0][:prefix_len]) if prefix_len else ()
        if prefix and any(tuple(p[:prefix_len]) != prefix for p in batch):
            raise BackendError("prompts in one batch do not share the declared prefix")
        tails = [list(p[prefix_len:]) for p in batch]
        if min(len(t) for t in tails) == 0:
            raise BackendError("a prompt has no tokens after its shared prefix")
        if self.attention != "mask" and self._layout_ok():
            from calimon.scoring.backends.packing import forward_layout

            view = functools.partial(_read_only_prefix, self._prefix_kv(prefix)) if prefix else None
            return forward_layout(self, tails, prefix, view, capture, pack=self.packing,
                                  variant=self.attention)
        lengths = torch.tensor([len(t) for t in tails])
        width = int(lengths.max())
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), prefix_len + width), dtype=torch.long)
        mask[:, :prefix_len] = 1
        for row, t in enumerate(tails):
            ids[row, : len(t)] = torch.tensor(t)
            mask[row, prefix_len: prefix_len + len(t)] = 1
        positions = (torch.arange(width) + prefix_len).unsqueeze(0).expand(len(batch), -1)
        kwargs = {}
        if prefix:
            kwargs["past_key_values"] = _read_only_prefix(self._prefix_kv(prefix), len(batch))
        dev = self._device
        hooks, got = [], None
        if capture is not None:
            hooks, got = self._install_hooks(capture[0], capture[1], lengths)
        try:
            with torch.inference_mode():
                hidden = model.model(input_ids=ids.to(dev), attention_mask=mask.to(dev),
                                     position_ids=positions.to(dev), use_cache=bool(prefix),
                                     **kwargs).last_hidden_state
                last = hidden[torch.arange(len(batch)), (lengths - 1).to(dev)]
                logits = model.lm_head(last).float()
                logprobs = torch.log_softmax(logits, dim=-1).cpu().numpy()
        finally:
            for h in hooks:
                h.remove()
        if capture is None:
            return logprobs
        return logprobs, got.result()

    def _layout_ok(self) -> bool:
        """Whether the model runs calimon's mask-free layout (switched to it on first use)."""
        from calimon.scoring.backends.layout_attention import use_layout_attention

        return use_layout_attention(self.model)

    def _install_hooks(self, spec, spans, lengths):
        from calimon.scoring.backends.capture import LayerCollector

        collector = LayerCollector(spec, spans, lengths)
        modules = {0: self.model.get_input_embeddings()}
        for i, layer in enumerate(self._decoder_layers()):
            modules[i + 1] = layer
        wanted = sorted(set(spec.layers) | set(spec.token_layers))
        hooks = [modules[k].register_forward_hook(collector.hook(k)) for k in wanted]
        return hooks, collector

    # -- generation --------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 constraint=None) -> list[list[int]]:
        """Greedy continuation of each prompt (left-padded batches of `generate_batch_size`),
        stopping at end of turn; with a `calimon.decoding.Constraint`, each row is held to its
        regex by an outlines-core guide (`calimon.scoring.backends.constrained.GuideMask`)."""
        import torch

        batch_size = self.generate_batch_size

        model, tok = self.model, self.tokenizer
        stops = list(stop_token_ids(tok))
        pad = tok.pad_token_id if tok.pad_token_id is not None else stops[0]
        index = None
        if constraint is not None:
            from calimon.scoring.backends.constrained import regex_index

            index = regex_index(tok, constraint.regex)
        results: list[list[int]] = [[] for _ in prompts]
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width = max(len(prompts[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, i in enumerate(idx):
                p = list(prompts[i])
                ids[row, width - len(p):] = torch.tensor(p)
                mask[row, width - len(p):] = 1
            kwargs = {}
            if index is not None:
                from transformers import LogitsProcessorList

                from calimon.scoring.backends.constrained import GuideMask

                kwargs["logits_processor"] = LogitsProcessorList(
                    [GuideMask(index, len(idx), width, stops)])
            self.forward_calls += 1
            with torch.inference_mode():
                out = model.generate(input_ids=ids.to(self._device),
                                     attention_mask=mask.to(self._device),
                                     max_new_tokens=max_new_tokens, do_sample=False,
                                     eos_token_id=stops, pad_token_id=pad,
                                     top_p=None, top_k=None, temperature=None, **kwargs)
            for row, i in enumerate(idx):
                new = out[row, width:].tolist()
                cut = next((k for k, t in enumerate(new) if t in stops), len(new))
                results[i] = new[:cut]
        return results


def timed(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), seconds it took)`` by the wall clock."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start
