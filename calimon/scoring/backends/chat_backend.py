"""Chat-completions backend (``--backend chat``): a monitor behind an OpenAI-compatible
``/v1/chat/completions`` API (hosted services, ``vllm serve``).

The monitor prompt travels as chat messages (`calimon.prompts.ChatPrompt`); the API applies
its own chat template and tokenizer. Distribution readouts (verdict, json) send one request with
``max_tokens=1, logprobs=true, top_logprobs=k`` and read the answer words from the returned token
*strings* (`calimon.numerics.readouts.read_top_strings`); the mass outside the top-k is format mass. The
json readout's ``{"misbehavior_detected":`` prefix is sent as a prefilled assistant turn where
the API takes one (``prefill: continue_final_message``, vLLM), and refused with a clear error
where it does not. Generated readouts (binary, verbal, sampled) read the message text.

A good client: bounded concurrency, retries with backoff honouring ``Retry-After``
(`calimon.scoring.backends.http_client`), per-request timeouts, request and token counts (and the cost,
when the model config gives prices), and a journal that keeps every answer as it arrives
(`calimon.scoring.backends.journal`). A request that fails for good comes back as a `RequestFailed` in
place of its reply, so one transcript's failure becomes one "error" reading (retried on the next
run) and never loses the answers already stored; authentication and unknown-model failures
(401, 403, 404) stop the run at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from calimon.errors import BackendError, InputError
from calimon.models import ResolvedModel
from calimon.scoring.backends.base import (
    Constrained,
    Messages,
    MessagesBackend,
    Remote,
    Sampling,
)
from calimon.scoring.backends.http_client import DEFAULT_KEY_ENVS, JsonClient, RequestFailed, reach
from calimon.scoring.backends.journal import Journal, request_key

ENDPOINT = "chat/completions"
JOURNAL_ENV = "CALIMON_API_JOURNAL"  # where the answer journal lives (default: in CALIMON_HOME)
FATAL_STATUS = frozenset({401, 403, 404})
NO_LOGPROBS = ("the verdict and json readouts need them; the sampled, verbal and binary "
               "readouts run without (--readout sampled or --readout verbal)")


@dataclass(frozen=True)
class ChatReply:
    """One API answer: the generated texts (one per sample), the top (token text, log-prob)
    entries at the first answer position when asked for, and the tokens the API counted."""

    texts: tuple[str, ...] = ()
    top: tuple[tuple[str, float], ...] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class SampledAnswers:
    """The answers to one prompt of the sampled readout as they arrive: an API that returns
    fewer than asked for is asked again for the rest (a new seed each time), in at most
    ``samples`` requests."""

    samples: int
    seed: int | None
    texts: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0,
                                                             "completion_tokens": 0})
    requests: int = 0

    def wanted(self) -> bool:
        """Whether to ask again."""
        return len(self.texts) < self.samples and self.requests < self.samples

    def fields(self, count_field: str) -> dict[str, Any]:
        """The next request's count of answers (under ``count_field``) and seed; none for a
        single answer."""
        if self.samples <= 1:
            return {}
        out: dict[str, Any] = {count_field: self.samples - len(self.texts)}
        if self.seed is not None:
            out["seed"] = self.seed + self.requests
        return out

    def add(self, texts: Sequence[str], counts: dict[str, int]) -> None:
        """One request's answers and token counts."""
        self.requests += 1
        self.texts.extend(texts)
        for name, value in counts.items():
            self.counts[name] += value

    def reply(self) -> ChatReply:
        """The answers as one `ChatReply`."""
        return ChatReply(texts=tuple(self.texts[:self.samples]), **self.counts)


class ChatBackend(MessagesBackend):
    """Scores chat-message prompts on a chat-completions API. Options: `ChatOptions` (plus
    ``api_key`` and ``journal_path`` for tests and library callers). Settings left unset come
    from the model config's ``api:`` block (`calimon.models.ApiConfig`)."""

    name = "chat"
    capabilities = frozenset({Messages, Sampling, Constrained, Remote})

    def __init__(self, model: ResolvedModel, base_url: str | None = None, *,
                 served_model: str | None = None, api_key_env: str | None = None,
                 top_logprobs: int = 20, prefill: str | None = None, concurrency: int = 8,
                 timeout_s: float = 120.0, retries: int = 4, backoff_s: float = 0.5,
                 max_backoff_s: float = 60.0, seed: int | None = 0, journal: bool = True,
                 extra_body: dict[str, Any] | None = None, api_key: str | None = None,
                 journal_path: str | None = None):
        self.model_ref = model
        self.base_url = base_url
        self.served_model = served_model
        self.api_key_env = api_key_env
        self.top_logprobs = top_logprobs
        self.prefill = prefill
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.seed = seed
        self.journal = journal
        self.extra_body = extra_body
        self.api_key = api_key
        self.journal_path = journal_path
        self.forward_calls = 0  # requests sent (journal hits not counted)
        self._counts = {"requests": 0, "journal_hits": 0, "failed": 0, "prompt_tokens": 0,
                        "completion_tokens": 0}
        self._lock = threading.Lock()
        self._journal: Journal | None = None

    # -- settings from options, else the model config's api block -----------------------------
    @property
    def _api(self):
        from calimon.models import ApiConfig

        return self.model_ref.config.api or ApiConfig()

    @property
    def url(self) -> str:
        """The API's base URL (option, else the model config's ``api.base_url``)."""
        url = self.base_url or self._api.base_url
        if not url:
            raise InputError("the chat backend needs --base-url (e.g. https://api.example.com/v1 "
                             "or http://127.0.0.1:8000/v1), or api.base_url in the model config",
                             field="base_url")
        return url

    @property
    def served(self) -> str:
        """The model name sent with each request."""
        return self.served_model or self._api.served_model or self.model_ref.name

    def server_url(self) -> str:
        """The API's base URL (`Remote`)."""
        return self.url

    def reach(self) -> str | None:
        """None when the API answers (any status: a 401 is an API that is there), else the
        connection error (`Remote`)."""
        return reach(self._client())

    def _client(self) -> JsonClient:
        env = self.api_key_env or self._api.api_key_env
        return JsonClient(self.url, timeout_s=self.timeout_s, retries=self.retries,
                          backoff_s=self.backoff_s, max_backoff_s=self.max_backoff_s,
                          api_key_env=(env,) if env else DEFAULT_KEY_ENVS, api_key=self.api_key)

    def _journal_db(self) -> Journal | None:
        if not self.journal:
            return None
        if self._journal is None:
            from calimon.data.paths import calimon_home

            self._journal = Journal(self.journal_path or os.environ.get(JOURNAL_ENV)
                                    or calimon_home() / "api-journal.sqlite")
        return self._journal

    # -- usage -------------------------------------------------------------------------------
    @property
    def usage(self) -> dict[str, Any]:
        """Requests sent, answers read from the journal instead, failed requests, tokens the
        API counted, and their cost in USD when the model config gives prices (else None)."""
        with self._lock:
            out: dict[str, Any] = dict(self._counts)
        api = self._api
        if api.input_usd_per_mtok is not None and api.output_usd_per_mtok is not None:
            out["cost_usd"] = (out["prompt_tokens"] * api.input_usd_per_mtok +
                               out["completion_tokens"] * api.output_usd_per_mtok) / 1e6
        else:
            out["cost_usd"] = None
        return out

    # -- transport ---------------------------------------------------------------------------
    def _post(self, payload: dict) -> dict:
        client = self._client()
        endpoint = client.url(ENDPOINT)
        journal = self._journal_db()
        key = request_key(endpoint, payload) if journal else ""
        cached = journal.get(key) if journal else None
        if cached is not None:
            with self._lock:
                self._counts["journal_hits"] += 1
            return cached
        out = client.request("POST", ENDPOINT, payload)
        if not isinstance(out, dict) or not out.get("choices"):
            raise RequestFailed(f"POST {endpoint} returned no choices: {str(out)[:200]}",
                                retryable=True)
        with self._lock:
            self.forward_calls += 1
            self._counts["requests"] += 1
            for name, value in _token_counts(out).items():
                self._counts[name] += value
        if journal:
            journal.put(key, endpoint, out)
        return out

    def _payload(self, prompt, **fields) -> dict:
        messages = list(prompt.messages)
        body: dict[str, Any] = {"model": self.served, "messages": messages, **fields}
        if prompt.assistant_prefix:
            if (self.prefill or self._api.prefill) != "continue_final_message":
                raise InputError(
                    f"this readout starts the answer with {prompt.assistant_prefix!r}, which "
                    "needs an API that continues a prefilled assistant turn; this one is "
                    "configured without (prefill: none). A vLLM server takes one: set the chat "
                    "backend's prefill option (or api.prefill in the model config) to "
                    "continue_final_message; otherwise use --readout verdict, sampled or verbal",
                    field="prefill")
            messages.append({"role": "assistant", "content": prompt.assistant_prefix})
            body.update(continue_final_message=True, add_generation_prompt=False)
        body.update(self.extra_body or {})
        return body

    def _each(self, fn: Callable[[Any], ChatReply], prompts: Sequence[Any]) -> list:
        """``fn`` on every prompt on a bounded thread pool; a request that fails for good is
        returned as its `RequestFailed` (401/403/404, and any refusal of a prefilled turn,
        raised: they would fail every request of the run)."""
        def one(prompt):
            try:
                return fn(prompt)
            except RequestFailed as exc:
                if exc.status in FATAL_STATUS or (prompt.assistant_prefix and not exc.retryable):
                    raise BackendError(f"{exc} (with a prefilled assistant turn: check that "
                                       "the API takes one)" if prompt.assistant_prefix
                                       else str(exc)) from None
                with self._lock:
                    self._counts["failed"] += 1
                return exc

        if len(prompts) <= 1 or self.concurrency <= 1:
            return [one(p) for p in prompts]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(pool.map(one, prompts))

    # -- the Messages capability --------------------------------------------------------------
    def answer_top(self, prompts: Sequence[Any], top_logprobs: int | None = None) -> list:
        """Per prompt, a `ChatReply` whose ``top`` holds the top-k (token text, log-prob)
        entries of the first answer token, or the `RequestFailed` of its request."""
        k = top_logprobs or self.top_logprobs
        if not 1 <= k <= 20:
            raise InputError(f"expected top_logprobs in 1..20, got {k}", field="top_logprobs")

        def one(prompt) -> ChatReply:
            out = self._post(self._payload(prompt, max_tokens=1, temperature=0.0,
                                           logprobs=True, top_logprobs=k))
            choice = out["choices"][0]
            return ChatReply(texts=(_content(choice),), top=self._top_of(choice),
                             **_token_counts(out))

        return self._each(one, prompts)

    def _top_of(self, choice: dict) -> tuple[tuple[str, float], ...]:
        lp = choice.get("logprobs") if isinstance(choice, dict) else None
        content = lp.get("content") if isinstance(lp, dict) else None
        first = content[0] if isinstance(content, list) and content else None
        tops = first.get("top_logprobs") if isinstance(first, dict) else None
        if not tops:
            raise BackendError(f"{self._client().url(ENDPOINT)} returned no logprobs for a "
                               f"request with logprobs=true, top_logprobs="
                               f"{self.top_logprobs}; {NO_LOGPROBS}")
        return tuple((str(t.get("token", "")), float(t["logprob"])) for t in tops
                     if isinstance(t, dict) and isinstance(t.get("logprob"), int | float))

    def complete(self, prompts: Sequence[Any], max_tokens: int, *, samples: int = 1,
                 temperature: float = 0.0, constraint=None) -> list:
        """Per prompt, a `ChatReply` with ``samples`` generated answers (``n`` in one request;
        an API that returns fewer is asked again for the rest), or its `RequestFailed`. With a
        `calimon.decoding.Constraint`, its JSON schema goes in ``response_format`` (an API
        that ignores the field answers freely; see docs/backends.md)."""
        fixed: dict[str, Any] = {}
        if constraint is not None:
            fixed["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "monitor_answer", "schema": constraint.schema, "strict": True}}

        def one(prompt) -> ChatReply:
            got = SampledAnswers(samples, self.seed)
            while got.wanted():
                out = self._post(self._payload(prompt, max_tokens=max_tokens,
                                               temperature=temperature, **fixed,
                                               **got.fields("n")))
                got.add([_content(c) for c in out["choices"]], _token_counts(out))
            return got.reply()

        return self._each(one, prompts)

    def close(self) -> None:
        """Close the journal."""
        if self._journal is not None:
            self._journal.close()


def _content(choice: dict) -> str:
    msg = choice.get("message") if isinstance(choice, dict) else None
    content = msg.get("content") if isinstance(msg, dict) else None
    return content if isinstance(content, str) else ""


def _token_counts(out: dict) -> dict[str, int]:
    usage = out.get("usage") if isinstance(out.get("usage"), dict) else {}
    return {"prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "completion_tokens": int(usage.get("completion_tokens") or 0)}
