"""Prefix sharing for masked variants: :func:`share_plan` groups prompts that share a long
prefix, and :class:`PrefixSharingBackend` runs each group's base once with a KV cache and every
other member only from the point where it departs from the base.

Masked variants of one sample share every token up to the first masked unit (template, request,
the response before it), so a variant costs its tail, not the whole transcript.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


@dataclass(frozen=True)
class SharePlan:
    """One group of prompts: ``base`` runs whole; each other member (prompt index, start) runs
    from ``start``, reusing the base's cache before it; ``copies`` equal the base."""

    base: int
    members: tuple[tuple[int, int], ...]
    copies: tuple[int, ...] = ()


def _group(lists: list[list[int]], order: list[int], sizes: np.ndarray, adj: np.ndarray,
           lo: int, hi: int, prefix_len: int) -> tuple[int, SharePlan]:
    """(tokens, plan) of the sorted prompts [lo, hi) as one group (see `share_plan`): ``order``
    sorts the prompts, ``sizes`` and ``adj`` are the sorted lengths and neighbour LCPs."""
    n = hi - lo
    lcp = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        lcp[i, i] = sizes[lo + i]
        if i + 1 < n:
            run = np.minimum.accumulate(adj[lo + i:hi - 1])
            lcp[i, i + 1:] = run
            lcp[i + 1:, i] = run
    k = int(np.argmax(lcp.sum(axis=1) - lcp.diagonal()))
    members, copies, tokens = [], [], int(sizes[lo + k]) - prefix_len
    for i in range(n):
        if i == k:
            continue
        if lcp[i, k] == sizes[lo + i] == sizes[lo + k]:
            copies.append(order[lo + i])
            continue
        start = min(int(lcp[i, k]), int(sizes[lo + i]) - 1)
        members.append((order[lo + i], start))
        tokens += int(sizes[lo + i]) - start
    members.sort(key=lambda m: (len(lists[m[0]]) - m[1], m[0]))
    return tokens, SharePlan(order[lo + k], tuple(members), tuple(copies))


def share_plan(prompts: Sequence[Sequence[int]], prefix_len: int, min_shared: int = 16
               ) -> tuple[list[SharePlan], list[int]]:
    """How :class:`PrefixSharingBackend` runs ``prompts``: groups of prompts that share more
    than ``prefix_len + min_shared`` leading tokens, and the prompts left to run plainly.

    Prompts are sorted; neighbours share their longest common prefix (LCP), and the LCP of any
    two is the smallest neighbour LCP between them. A group's base is the member sharing the
    most tokens with the others (ties: the first in sorted order); each other member runs from
    its LCP with the base. A run of neighbours is split at its weakest link (smallest LCP,
    the first among equals) whenever running the two halves as separate groups costs fewer
    tokens, so the variants of two samples whose requests merely begin alike are not forced
    under one base."""
    lists = [list(p) for p in prompts]
    order = sorted(range(len(lists)), key=lambda i: lists[i])
    sizes = np.array([len(lists[i]) for i in order])
    adj = np.array([_lcp(lists[order[k]], lists[order[k + 1]]) for k in range(len(order) - 1)],
                   dtype=np.int64)
    plans: list[SharePlan] = []
    singles: list[int] = []

    def best(lo: int, hi: int) -> tuple[int, list[SharePlan | int]]:
        if hi - lo == 1:
            return int(sizes[lo]) - prefix_len, [order[lo]]
        cut = lo + 1 + int(np.argmin(adj[lo:hi - 1]))
        left, right = best(lo, cut), best(cut, hi)
        split = (left[0] + right[0], left[1] + right[1])
        if adj[cut - 1] <= prefix_len + min_shared:
            return split
        tokens, plan = _group(lists, order, sizes, adj, lo, hi, prefix_len)
        return split if split[0] < tokens else (tokens, [plan])

    if lists:
        for item in best(0, len(lists))[1]:
            if isinstance(item, SharePlan):
                plans.append(item)
            else:
                singles.append(item)
    return plans, sorted(singles)


def shared_tokens(prompts: Sequence[Sequence[int]], prefix_len: int, min_shared: int = 16
                  ) -> int:
    """Tokens :class:`PrefixSharingBackend` runs for ``prompts`` (template prefix excluded)."""
    plans, singles = share_plan(prompts, prefix_len, min_shared)
    total = sum(len(prompts[i]) - prefix_len for i in singles)
    for plan in plans:
        total += len(prompts[plan.base]) - prefix_len
        total += sum(len(prompts[i]) - start for i, start in plan.members)
    return total


class PrefixSharingBackend:
    """Wraps a :class:`~calimon.scoring.backends.transformers_backend.TransformersBackend` (anything
    with ``.model``, ``.tokenizer`` and ``next_token_logprobs``); every other attribute is the
    wrapped backend's, so a Monitor over it has the same store key.

    ``next_token_logprobs`` follows :func:`share_plan`: in each group of prompts sharing a long
    prefix, the base runs once from the template-prefix cache and every other member runs only
    its tokens after the point where it departs from the base, attending to the base's cache
    before that point (in a batch of members with different departure points, each row masks
    the cached positions it does not share). Prompts in no group go to the wrapped backend.

    ``tokens_computed`` counts the tokens run through the model (template prefix excluded),
    ``tokens_plain`` those the wrapped backend alone would have run for the same prompts."""

    def __init__(self, backend, min_shared: int = 16):
        self.backend = backend
        self.min_shared = min_shared
        self.tokens_computed = 0
        self.tokens_plain = 0
        self.group_calls = 0
        self._prefix: tuple[tuple[int, ...], list] | None = None

    def __getattr__(self, name: str):
        if name == "backend":  # not set yet (copy or pickle probing)
            raise AttributeError(name)
        return getattr(self.backend, name)

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], prefix_len: int = 0
                            ) -> np.ndarray:
        """(n, vocab) log-probabilities of the next token after each prompt, computed with prefix
        sharing (class docstring); rows in prompt order."""
        prompts = [list(p) for p in prompts]
        plans, singles = share_plan(prompts, prefix_len, self.min_shared)
        parts: list[tuple[list[int], np.ndarray]] = []
        for plan in plans:
            parts += self._run_plan(prompts, plan, prefix_len)
        if singles:
            rows = self.backend.next_token_logprobs([prompts[i] for i in singles], prefix_len)
            self.tokens_computed += sum(len(prompts[i]) - prefix_len for i in singles)
            parts.append((singles, rows))
        self.tokens_plain += sum(len(p) - prefix_len for p in prompts)
        if not parts:
            return np.empty((0, 0), dtype=np.float32)
        out = np.empty((len(prompts), parts[0][1].shape[1]), dtype=np.float32)
        for idx, rows in parts:
            out[idx] = rows
        return out

    # -- the model side ----------------------------------------------------------------------
    def _torch(self):
        import torch

        model = self.backend.model
        return torch, model, next(model.parameters()).device

    @staticmethod
    def _layers(cache) -> list[tuple[Any, Any]]:
        if hasattr(cache, "layers"):
            return [(layer.keys, layer.values) for layer in cache.layers]
        return list(zip(cache.key_cache, cache.value_cache, strict=True))  # older transformers

    @staticmethod
    def _cache(layers: list[tuple[Any, Any]], length: int, rows: int):
        from transformers import DynamicCache

        cache = DynamicCache()
        for i, (k, v) in enumerate(layers):
            cache.update(k[:, :, :length].expand(rows, -1, -1, -1).contiguous(),
                         v[:, :, :length].expand(rows, -1, -1, -1).contiguous(), i)
        return cache

    def _prefix_layers(self, prefix: tuple[int, ...]) -> list:
        torch, model, dev = self._torch()
        if self._prefix is None or self._prefix[0] != prefix:
            with torch.inference_mode():
                out = model.model(input_ids=torch.tensor([list(prefix)], device=dev),
                                  use_cache=True)
            self._prefix = (prefix, self._layers(out.past_key_values))
        return self._prefix[1]

    def _forward(self, tails: list[list[int]], starts: list[int], past: list, past_len: int
                 ) -> tuple[np.ndarray, Any]:
        """Run ``tails`` (row r from position starts[r]) over the first ``past_len`` cached
        positions, of which row r sees only the first starts[r]."""
        torch, model, dev = self._torch()
        n, width = len(tails), max(len(t) for t in tails)
        pad = getattr(self.backend.tokenizer, "pad_token_id", None) or 0
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, past_len + width), dtype=torch.long)
        positions = torch.zeros((n, width), dtype=torch.long)
        for r, (t, s) in enumerate(zip(tails, starts, strict=True)):
            ids[r, :len(t)] = torch.tensor(t)
            mask[r, :s] = 1
            mask[r, past_len:past_len + len(t)] = 1
            positions[r] = torch.arange(s, s + width)
        kwargs: dict[str, Any] = {"use_cache": True}
        if past_len:
            kwargs["past_key_values"] = self._cache(past, past_len, n)
        lengths = torch.tensor([len(t) for t in tails])
        with torch.inference_mode():
            out = model.model(input_ids=ids.to(dev), attention_mask=mask.to(dev),
                              position_ids=positions.to(dev), **kwargs)
            last = out.last_hidden_state[torch.arange(n), (lengths - 1).to(dev)]
            logp = torch.log_softmax(model.lm_head(last).float(), dim=-1).cpu().numpy()
        self.tokens_computed += int(lengths.sum())
        return logp, out.past_key_values

    def _run_plan(self, prompts: list[list[int]], plan: SharePlan, prefix_len: int
                  ) -> list[tuple[list[int], np.ndarray]]:
        self.group_calls += 1
        base = prompts[plan.base]
        past = self._prefix_layers(tuple(base[:prefix_len])) if prefix_len else []
        base_row, cache = self._forward([base[prefix_len:]], [prefix_len], past, prefix_len)
        parts = [([plan.base, *plan.copies], np.repeat(base_row, 1 + len(plan.copies), 0))]
        layers = self._layers(cache)
        budget = getattr(self.backend, "batch_tokens", 8192)
        max_rows = getattr(self.backend, "max_batch_size", 32)
        members = plan.members  # sorted by tail length
        def fits(k: int, j: int) -> bool:  # members[k:j + 1] in one batch
            rows = j + 1 - k
            tail = len(prompts[members[j][0]]) - members[j][1]
            past = max(s for _, s in members[k:j + 1])
            # tails within the backend's budget; the repeated cache within twice that
            return rows <= max_rows and rows * tail <= budget and rows * (past + tail) <= \
                2 * budget

        k = 0
        while k < len(members):
            j = k + 1
            while j < len(members) and fits(k, j):
                j += 1
            chunk = members[k:j]
            starts = [s for _, s in chunk]
            rows, _ = self._forward([prompts[i][s:] for i, s in chunk], starts, layers,
                                    max(starts))
            parts.append(([i for i, _ in chunk], rows))
            k = j
        return parts


__all__ = ["PrefixSharingBackend", "SharePlan", "share_plan", "shared_tokens"]
