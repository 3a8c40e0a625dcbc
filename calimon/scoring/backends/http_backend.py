"""OpenAI-compatible HTTP backend: a model already served (`vllm serve`, or any server whose
/v1/completions endpoint accepts token-id prompts and returns `logprobs`).

Prompts travel as token ids, encoded locally with the model's own tokenizer, so the server reads
exactly the tokens the transformers backend would. A server returns log-probs for a few ids only:
with `answer_ids=True` the request names every surface form of the verdict and json answers
(`logprob_token_ids`, a vLLM extension), otherwise the server's top-K. `next_token_logprobs`
turns them into a full-vocabulary array (see `dense_logprobs`). Requests run on a bounded thread
pool with retries, backoff and timeouts. Standard library only: no extra is needed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from calimon.errors import BackendError, InputError
from calimon.models import ResolvedModel
from calimon.scoring.backends.base import BackendBase, Constrained, Remote
from calimon.scoring.backends.http_client import JsonClient, reach
from calimon.scoring.backends.loading import TokenIdVocab, stop_token_ids

_TOKEN_ID_PREFIX = "token_id:"


def dense_logprobs(vocab_size: int, entries: Mapping[int, float]) -> np.ndarray:
    """A full (vocab,) float32 log-prob vector from the entries a server returned.

    The returned ids keep their exact log-probs (normalized over the full vocabulary, as vLLM
    and OpenAI-style servers report them). The remaining mass, 1 - sum(exp(entries)), is spread
    evenly over every other id, so the vector sums to 1 and a reader gets p_yes, p_no and the
    format mass exactly whenever every answer form was returned. The even share never exceeds
    the smallest returned top-K entry, so the ordering of a top-K answer is kept."""
    out = np.empty(vocab_size, dtype=np.float32)
    ids = np.fromiter(entries.keys(), dtype=np.int64, count=len(entries))
    vals = np.fromiter(entries.values(), dtype=np.float64, count=len(entries))
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids[(ids < 0) | (ids >= vocab_size)][0])
        raise BackendError(f"server returned token id {bad} outside the vocabulary "
                           f"(size {vocab_size}); is it serving a different model?")
    finite = np.isfinite(vals)
    rest = 1.0 - float(np.exp(vals[finite]).sum())
    others = vocab_size - ids.size
    out[:] = np.log(rest / others) if rest > 0 and others > 0 else -np.inf
    out[ids] = np.where(finite, vals, -np.inf)
    return out


class HTTPBackend(TokenIdVocab, BackendBase):
    """Scores token-id prompts on an OpenAI-compatible completions server.

    `model` gives the tokenizer and the store key (name and revision); `served_model` is the
    name the server knows (default: the first one it lists at /v1/models). `answer_ids` asks
    for the answer forms by id (vLLM servers); a server that ignores it answers with its
    top-`top_logprobs` list, which the backend reads the same way. Options: `HTTPOptions`
    (plus `tokenizer`, an in-memory tokenizer for tests). A server exposes no hidden states.
    Constrained decoding is asked for with vLLM's ``structured_outputs: {"regex": ...}`` request
    field; a server that ignores the field decodes freely (docs/backends.md)."""

    name = "http"
    capabilities = frozenset({Constrained, Remote})

    def __init__(self, model: ResolvedModel, base_url: str = "http://127.0.0.1:8000/v1", *,
                 served_model: str | None = None, api_key: str | None = None,
                 answer_ids: bool = True, top_logprobs: int = 20, concurrency: int = 8, timeout_s: float = 120.0,
                 retries: int = 4, backoff_s: float = 0.5, max_backoff_s: float = 20.0,
                 tokenizer=None):
        self.model_ref = model
        self.base_url = base_url
        self.served_model = served_model
        self.api_key = api_key
        self.answer_ids = answer_ids
        self.top_logprobs = top_logprobs
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.forward_calls = 0  # completed completion requests
        self._tokenizer = tokenizer  # None: loaded from the model folder on first use
        self._vocab_size: int | None = None
        self._text_to_id: dict[str, int] | None = None
        self._answer_ids: list[int] | None = None
        self._lock = threading.Lock()

    # -- setup -------------------------------------------------------------------------------
    def _url(self, endpoint: str) -> str:
        return JsonClient(self.base_url).url(endpoint)

    def _model_name(self) -> str:
        if self.served_model is None:
            listing = self._request("GET", "models", None)
            data = listing.get("data") if isinstance(listing, dict) else None
            if not data or not isinstance(data[0], dict) or "id" not in data[0]:
                raise BackendError(f"{self._url('models')} lists no model; pass served_model")
            self.served_model = str(data[0]["id"])
        return self.served_model

    def server_url(self) -> str:
        """The server's base URL (`Remote`)."""
        return self.base_url

    def reach(self) -> str | None:
        """None when the server answers, else the connection error (`Remote`)."""
        return reach(JsonClient(self.base_url, timeout_s=self.timeout_s, api_key=self.api_key))

    # -- transport ---------------------------------------------------------------------------
    def _request(self, method: str, endpoint: str, payload: dict | None) -> dict:
        """One JSON request through `JsonClient` (retries, backoff honouring Retry-After,
        timeouts; one-line errors naming the endpoint and the status)."""
        client = JsonClient(self.base_url, timeout_s=self.timeout_s, retries=self.retries,
                            backoff_s=self.backoff_s, max_backoff_s=self.max_backoff_s,
                            api_key=self.api_key)
        return client.request(method, endpoint, payload)

    def _map(self, fn, items: Sequence) -> list:
        if len(items) <= 1 or self.concurrency <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def _complete(self, prompt: Sequence[int], max_tokens: int, logprobs: int,
                  token_ids: list[int] | None = None, regex: str | None = None) -> dict:
        payload = {"model": self._model_name(), "prompt": [int(t) for t in prompt],
                   "max_tokens": max_tokens, "temperature": 0.0, "logprobs": logprobs,
                   "return_tokens_as_token_ids": True}
        if token_ids:
            payload["logprob_token_ids"] = token_ids
        if regex is not None:
            payload["structured_outputs"] = {"regex": regex}
        out = self._request("POST", "completions", payload)
        with self._lock:
            self.forward_calls += 1
        choices = out.get("choices") if isinstance(out, dict) else None
        if not choices:
            raise BackendError(f"{self._url('completions')} returned no choices: "
                               f"{json.dumps(out)[:300]}")
        return choices[0]

    # -- token mapping -----------------------------------------------------------------------
    def _token_id(self, token: str) -> int | None:
        """'token_id:123' (vLLM with return_tokens_as_token_ids), else the id whose text is
        `token` (servers that ignore the flag; the first id wins when several share a text)."""
        if token.startswith(_TOKEN_ID_PREFIX) and token[len(_TOKEN_ID_PREFIX):].isdigit():
            return int(token[len(_TOKEN_ID_PREFIX):])
        if self._text_to_id is None:
            tok = self.tokenizer
            table: dict[str, int] = {}
            for i, piece in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))):
                if piece is not None:
                    table.setdefault(tok.convert_tokens_to_string([piece]), i)
            self._text_to_id = table
        return self._text_to_id.get(token)

    def _top_entries(self, choice: dict) -> dict[int, float]:
        lp = choice.get("logprobs")
        tops = lp.get("top_logprobs") if isinstance(lp, dict) else None
        if not tops or not isinstance(tops[0], dict):
            raise BackendError(
                f"{self._url('completions')} returned no logprobs for a request with "
                f"logprobs={self.top_logprobs}; the server must support `logprobs` on the "
                "completions endpoint (vLLM does; raise its --max-logprobs if it refuses)")
        entries: dict[int, float] = {}
        for token, value in tops[0].items():
            tid = self._token_id(token)
            if tid is not None and value is not None:
                entries[tid] = float(value)
        sampled = lp.get("tokens") or []
        values = lp.get("token_logprobs") or []
        if sampled and values and values[0] is not None:
            tid = self._token_id(sampled[0])
            if tid is not None:
                entries.setdefault(tid, float(values[0]))
        return entries

    # -- backend interface -------------------------------------------------------------------
    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], prefix_len: int = 0
                            ) -> np.ndarray:
        """(n, vocab) next-token log-probs: the returned entries exact, the rest of the mass
        spread over the other ids (`dense_logprobs`). `prefix_len` is accepted for interface
        parity; the server's own prefix cache does that work."""
        if self.top_logprobs < 1:
            raise InputError(f"expected top_logprobs >= 1, got {self.top_logprobs}",
                             field="top_logprobs")
        wanted = self.readout_ids() if self.answer_ids else None
        choices = self._map(lambda p: self._complete(p, 1, self.top_logprobs, wanted),
                            list(prompts))
        out = np.empty((len(prompts), self.vocab_size), dtype=np.float32)
        for i, choice in enumerate(choices):
            out[i] = dense_logprobs(self.vocab_size, self._top_entries(choice))
        return out

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 constraint=None) -> list[list[int]]:
        """Greedy continuation token ids (the server stops at end of turn); with a
        `calimon.decoding.Constraint`, its regex goes in vLLM's ``structured_outputs`` field."""
        regex = constraint.regex if constraint is not None else None
        choices = self._map(lambda p: self._complete(p, max_new_tokens, 0, regex=regex),
                            list(prompts))
        tok = self.tokenizer
        stops = stop_token_ids(tok)
        results = []
        for choice in choices:
            lp = choice.get("logprobs")
            tokens = lp.get("tokens") if isinstance(lp, dict) else None
            ids = [self._token_id(t) for t in tokens] if tokens else None
            if ids is None or any(i is None for i in ids):
                ids = tok(choice.get("text") or "", add_special_tokens=False)["input_ids"]
            cut = next((k for k, t in enumerate(ids) if t in stops), len(ids))
            results.append(list(ids[:cut]))
        return results
