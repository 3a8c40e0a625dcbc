"""Inspect backend (``--backend inspect``): a monitor on any model Inspect's model API reaches
(`inspect_ai.model.get_model`: OpenAI, Anthropic, Google, vLLM, Ollama, ... and ``mockllm``).

The monitor prompt travels as Inspect chat messages; the provider applies its own template and
tokenizer, as for the ``chat`` backend (`calimon.scoring.monitor_chat` reads the replies).
Distribution readouts (verdict, json) ask for one token with ``GenerateConfig(logprobs=True,
top_logprobs=k)`` and read the answer words from the returned token strings; a provider that
returns no logprobs stops the run with a line naming the readouts that run without them
(sampled, verbal, binary). Sampled answers are asked for with ``num_choices`` (a provider that
returns fewer is asked again for the rest) and a seed; the binary readout's json decoding
sends the template's schema as ``response_schema``.

Inspect does the transport: its retries, rate limits, connection limits, API keys (the
provider's environment variables) and, inside an eval, the model events of the sample's
transcript. The backend is synchronous like every backend: called from an AnyIO worker thread
(the integrations score in one), it runs the requests on that thread's event loop, where an
eval's models live; elsewhere (the command line) on an event loop of its own.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from calimon.errors import BackendError, InputError, MissingExtraError
from calimon.models import ResolvedModel
from calimon.scoring.backends.base import (
    Constrained,
    Messages,
    MessagesBackend,
    Sampling,
)
from calimon.scoring.backends.chat_backend import NO_LOGPROBS, ChatReply, SampledAnswers


def _inspect():
    try:
        import inspect_ai.model as im
    except ImportError:  # pragma: no cover - the extra is missing
        raise MissingExtraError("the inspect backend needs inspect_ai: "
                                "pip install 'calimon[inspect]'") from None
    return im


class InspectBackend(MessagesBackend):
    """Scores chat-message prompts on an Inspect model. Options: `InspectOptions`; a library
    caller may hand over the Inspect ``Model`` itself (``inspect_model=``: an eval's model, a
    model role's), which is then used as is."""

    name = "inspect"
    capabilities = frozenset({Messages, Sampling, Constrained})

    def __init__(self, model: ResolvedModel, *, served_model: str | None = None,
                 base_url: str | None = None, top_logprobs: int = 20, concurrency: int = 8,
                 prefill: str | None = None, seed: int | None = 0,
                 model_args: dict[str, Any] | None = None, inspect_model: Any = None):
        self.model_ref = model
        self.served_model = served_model
        self.base_url = base_url
        self.top_logprobs = top_logprobs
        self.concurrency = concurrency
        self.prefill = prefill
        self.seed = seed
        self.model_args = dict(model_args or {})
        self._model = inspect_model
        self.forward_calls = 0
        self._counts = {"requests": 0, "journal_hits": 0, "failed": 0, "prompt_tokens": 0,
                        "completion_tokens": 0}
        self._cost: float | None = None
        self._lock = threading.Lock()
        self._portal_cm: Any = None
        self._portal: Any = None

    # -- the Inspect model -------------------------------------------------------------------
    @property
    def inspect_name(self) -> str:
        """The Inspect model name requests go to (``provider/model``)."""
        if self._model is not None:
            return str(self._model)
        api = self.model_ref.config.api
        return self.served_model or (api.served_model if api else None) or self.model_ref.name

    def inspect_model(self) -> Any:
        """The Inspect ``Model`` (made on first use with `get_model`; an unknown provider, a
        missing provider package or API key is a one-line error naming the model)."""
        with self._lock:
            if self._model is None:
                im = _inspect()
                kwargs = {"base_url": self.base_url} if self.base_url else {}
                try:
                    self._model = im.get_model(self.inspect_name, **kwargs, **self.model_args)
                except Exception as exc:  # Inspect raises plain exceptions for all of these
                    raise InputError(f"Inspect cannot make model {self.inspect_name!r}: "
                                     f"{type(exc).__name__}: {_plain(exc)}",
                                     field="model") from None
            return self._model

    # -- usage -------------------------------------------------------------------------------
    @property
    def usage(self) -> dict[str, Any]:
        """Requests sent, failed requests, tokens the provider counted, and their cost in USD
        (Inspect's, else the model config's prices, else None). ``journal_hits`` is always 0:
        Inspect's own cache is not used."""
        with self._lock:
            out: dict[str, Any] = dict(self._counts)
            cost = self._cost
        api = self.model_ref.config.api
        if cost is None and api and None not in (api.input_usd_per_mtok, api.output_usd_per_mtok):
            cost = (out["prompt_tokens"] * api.input_usd_per_mtok +
                    out["completion_tokens"] * api.output_usd_per_mtok) / 1e6
        out["cost_usd"] = cost
        return out

    def _count(self, output: Any) -> None:
        usage = getattr(output, "usage", None)
        with self._lock:
            self.forward_calls += 1
            self._counts["requests"] += 1
            if usage is not None:
                self._counts["prompt_tokens"] += int(usage.input_tokens or 0)
                self._counts["completion_tokens"] += int(usage.output_tokens or 0)
                if usage.total_cost is not None:
                    self._cost = (self._cost or 0.0) + float(usage.total_cost)

    # -- running coroutines from a synchronous caller -----------------------------------------
    def _run(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``fn()`` awaited: on the event loop of the AnyIO worker thread this is called from
        (an eval's), else on the backend's own loop (started on first use)."""
        import anyio.from_thread
        import anyio.lowlevel

        try:  # the caller's event loop, asked for first: fn itself may raise anything
            token = anyio.from_thread.run_sync(anyio.lowlevel.current_token)
        except anyio.NoEventLoopError:
            token = None
        if token is not None:
            return anyio.from_thread.run(fn, token=token)
        with self._lock:
            if self._portal is None:
                self._portal_cm = anyio.from_thread.start_blocking_portal()
                self._portal = self._portal_cm.__enter__()
        return self._portal.call(fn)

    def _each(self, one: Callable[[Any, list], Awaitable[ChatReply]],
              prompts: Sequence[Any]) -> list:
        """``one(model, messages)`` for every prompt, at most ``concurrency`` at a time; a
        request that fails comes back as its error (one "error" reading, retried on the next
        run). A `BackendError` or `InputError` of calimon's own (no logprobs) stops the run."""
        import anyio

        inputs = [self._messages(p) for p in prompts]  # a prefill refused before any request
        model = self.inspect_model()
        results: list[Any] = [None] * len(prompts)
        fatal: list[Exception] = []

        async def guarded(i: int, limiter: anyio.CapacityLimiter) -> None:
            async with limiter:
                if fatal:
                    return
                try:
                    results[i] = await one(model, inputs[i])
                except (BackendError, InputError) as exc:
                    fatal.append(exc)
                except Exception as exc:  # the provider's failure of this one request
                    with self._lock:
                        self._counts["failed"] += 1
                    results[i] = BackendError(f"{self.inspect_name}: {type(exc).__name__}: "
                                              f"{exc}")

        async def gather() -> None:
            limiter = anyio.CapacityLimiter(max(1, self.concurrency))
            async with anyio.create_task_group() as tg:
                for i in range(len(prompts)):
                    tg.start_soon(guarded, i, limiter)

        self._run(gather)
        if fatal:
            raise fatal[0]
        return results

    async def _generate(self, model: Any, messages: list, **config: Any) -> Any:
        output = await model.generate(messages, config=_inspect().GenerateConfig(**config))
        self._count(output)
        if output.error:
            raise RuntimeError(output.error)
        return output

    def _messages(self, prompt: Any) -> list[Any]:
        im = _inspect()
        kinds = {"system": im.ChatMessageSystem, "user": im.ChatMessageUser,
                 "assistant": im.ChatMessageAssistant}
        messages = [kinds[m["role"]](content=m["content"]) for m in prompt.messages]
        if prompt.assistant_prefix:
            if self.prefill != "continue_final_message":
                raise InputError(
                    f"this readout starts the answer with {prompt.assistant_prefix!r}, which "
                    "needs a provider that continues a prefilled assistant turn: set the "
                    "inspect backend's prefill option to continue_final_message if yours does "
                    "(e.g. Anthropic's); otherwise use --readout verdict, sampled or verbal",
                    field="prefill")
            messages.append(im.ChatMessageAssistant(content=prompt.assistant_prefix))
        return messages

    # -- the Messages capability --------------------------------------------------------------
    def answer_top(self, prompts: Sequence[Any], top_logprobs: int | None = None) -> list:
        """Per prompt, a `ChatReply` whose ``top`` holds the top-k (token text, log-prob)
        entries of the first answer token, or the exception of its request."""
        k = top_logprobs or self.top_logprobs
        if not 1 <= k <= 20:
            raise InputError(f"expected top_logprobs in 1..20, got {k}", field="top_logprobs")

        async def one(model, messages) -> ChatReply:
            out = await self._generate(model, messages, max_tokens=1, temperature=0.0,
                                       logprobs=True, top_logprobs=k)
            choice = out.choices[0] if out.choices else None
            content = choice.logprobs.content if choice and choice.logprobs else None
            tops = content[0].top_logprobs if content else None
            if not tops:
                raise BackendError(f"Inspect model {self.inspect_name} returned no logprobs "
                                   f"for a request with logprobs=True, top_logprobs={k}; "
                                   f"{NO_LOGPROBS}")
            return ChatReply(texts=(out.completion,),
                             top=tuple((t.token, float(t.logprob)) for t in tops),
                             **_tokens(out))

        return self._each(one, prompts)

    def complete(self, prompts: Sequence[Any], max_tokens: int, *, samples: int = 1,
                 temperature: float = 0.0, constraint=None) -> list:
        """Per prompt, a `ChatReply` with ``samples`` generated answers (``num_choices`` in one
        request; a provider that returns fewer is asked again), or its exception. With a
        `calimon.decoding.Constraint`, its JSON schema goes in ``response_schema``."""
        fixed: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        if constraint is not None:
            from inspect_ai.util import JSONSchema

            fixed["response_schema"] = _inspect().ResponseSchema(
                name="monitor_answer", json_schema=JSONSchema.model_validate(constraint.schema),
                strict=True)

        async def one(model, messages) -> ChatReply:
            got = SampledAnswers(samples, self.seed)
            while got.wanted():
                out = await self._generate(model, messages, **fixed,
                                           **got.fields("num_choices"))
                got.add([c.message.text for c in out.choices], _tokens(out))
            return got.reply()

        return self._each(one, prompts)

    def close(self) -> None:
        """Stop the backend's own event loop, if it started one (the Inspect model stays
        Inspect's: it may be an eval's)."""
        with self._lock:
            cm, self._portal_cm, self._portal = self._portal_cm, None, None
        if cm is not None:
            cm.__exit__(None, None, None)


def _plain(exc: Exception) -> str:
    """An Inspect error's message on one line, without its console markup ([bold]...)."""
    return " ".join(re.sub(r"\[/?[a-z]+\]", "", str(exc)).replace("\\n", " ").split())


def _tokens(output: Any) -> dict[str, int]:
    usage = getattr(output, "usage", None)
    if usage is None:
        return {"prompt_tokens": 0, "completion_tokens": 0}
    return {"prompt_tokens": int(usage.input_tokens or 0),
            "completion_tokens": int(usage.output_tokens or 0)}


__all__ = ["InspectBackend"]
