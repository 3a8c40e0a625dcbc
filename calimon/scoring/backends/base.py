"""The backend contract: what every backend offers (`Backend`), the optional capabilities a
backend declares (`HiddenStates`, `LocalWeights`), and `requires`, the one way to ask for a
capability.

A backend declares its capabilities in the class attribute ``capabilities`` (a frozenset of the
capability protocols it implements); nothing probes for methods. A study that needs a
capability calls ``requires(backend, HiddenStates)`` and gets the backend back, or a one-line
`CapabilityError` naming the backend and the backends that would work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from calimon.errors import InputError
from calimon.models import ResolvedModel


class Backend(Protocol):
    """What every backend offers: token ids in, log-probs or token ids out.

    ``forward_calls`` counts model calls (batches, requests); ``close`` releases what the
    backend holds (engine processes, connections) and may be called more than once."""

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[type]]
    model_ref: ResolvedModel
    forward_calls: int

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (a transformers tokenizer), used to encode prompts and decode
        answers."""
        ...

    @property
    def vocab_size(self) -> int:
        """Rows of the log-prob arrays `next_token_logprobs` returns (the output vocabulary)."""
        ...

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], prefix_len: int = 0
                            ) -> np.ndarray:
        """(n, vocab) log-probabilities of the next token after each prompt; ``prefix_len`` > 0
        promises that every prompt starts with the same ``prefix_len`` tokens."""
        ...

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int
                 ) -> list[list[int]]:
        """Greedy continuation of each prompt, stopping at end of turn (stop token dropped).
        A backend with the `Constrained` capability also takes ``constraint=`` (a
        `calimon.decoding.Constraint`): what it generates then matches the constraint's
        regex (or, for a chat API, its JSON schema)."""
        ...

    def close(self) -> None:
        """Release what the backend holds (engine processes, connections); safe to call twice."""
        ...


class HiddenStates(Protocol):
    """Capability: hidden states of chosen layers from the scoring pass (probe heads)."""

    @property
    def num_layers(self) -> int:
        """Decoder blocks of the model; capture layers run 0 (embeddings) .. ``num_layers``."""
        ...

    @property
    def hidden_size(self) -> int:
        """Width of one captured hidden state."""
        ...

    def capture(self, prompts: Sequence[Sequence[int]], prefix_len: int, spec,
                spans: Sequence[tuple[int, int]]):
        """Next-token log-probs plus pooled (and per-token) hidden states
        (`calimon.scoring.backends.capture.Captured`) from one pass."""
        ...


class LocalWeights(Protocol):
    """Capability: the model's torch module lives in this process (``model``), so a caller may
    run its own forward passes on it (per-sample prefix sharing of masked span variants)."""

    @property
    def model(self) -> Any:
        """The model's torch module (loaded on first use), in eval mode."""
        ...


class Messages(Protocol):
    """Capability: the backend takes chat messages, not token ids (a chat-completions API).
    A monitor renders its prompt as `calimon.prompts.ChatPrompt` for it; the token-id methods
    of `Backend` raise a `CapabilityError` naming the token backends."""

    def answer_top(self, prompts: Sequence[Any], top_logprobs: int | None = None) -> list[Any]:
        """Per prompt, the top (token text, log-prob) entries at the first answer position
        (`calimon.scoring.backends.chat_backend.ChatReply`), or the request's failure."""
        ...

    def complete(self, prompts: Sequence[Any], max_tokens: int, *, samples: int = 1,
                 temperature: float = 0.0) -> list[Any]:
        """Per prompt, ``samples`` generated answers (greedy when ``temperature`` is 0), or the
        request's failure."""
        ...


class Constrained(Protocol):
    """Capability: generation held to a `calimon.decoding.Constraint` (``generate(...,
    constraint=...)``, or ``complete(..., constraint=...)`` on a chat API): the binary
    protocol's ``json`` decoding."""


class Sampling(Protocol):
    """Capability: the backend draws several answers at a temperature (the sampled readout)."""


class AllowedTokens(Protocol):
    """Capability: the greedy next token among given ids, over the model's full distribution
    (copy-constrained quotes, `calimon.studies.spans.copy_generation`)."""

    def greedy_among(self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int]],
                     prefix_len: int = 0) -> list[int]:
        """Per prompt, the most likely next token of those in its ``allowed`` ids."""
        ...


class Remote(Protocol):
    """Capability: the model is served elsewhere and reached over the network (http, chat).
    A run checks the server answers before it starts (`calimon.scoring.backends.offline`)."""

    def server_url(self) -> str:
        """The server's base URL, as the user named it."""
        ...

    def reach(self) -> str | None:
        """None when the server answers (any HTTP status), else what went wrong, in a few
        words (connection refused, timed out)."""
        ...


CAPABILITY_NAMES: dict[type, str] = {HiddenStates: "hidden states", LocalWeights: "local weights",
                                     Messages: "chat messages", Sampling: "sampled answers",
                                     Constrained: "constrained decoding",
                                     AllowedTokens: "a greedy choice among given tokens",
                                     Remote: "a remote server"}


class CapabilityError(InputError):
    """A backend lacks a capability a study needs (exit code 2: a choice of the user's)."""


class BackendBase:
    """Defaults every built-in backend shares: no optional capability, nothing to close."""

    name: ClassVar[str] = "backend"
    capabilities: ClassVar[frozenset[type]] = frozenset()

    def close(self) -> None:
        """Nothing to release."""


class MessagesBackend(BackendBase):
    """Base of the backends that take chat messages (`Messages`): the provider tokenizes on its
    side, so the token-id methods of `Backend` raise a `CapabilityError` naming the backends
    that take token ids."""

    def _no_tokens(self, what: str) -> CapabilityError:
        from calimon.scoring.backends.registry import backends_without

        return CapabilityError(f"{what} needs token ids, which the {self.name!r} backend does "
                               f"not provide (it sends chat messages); use --backend "
                               f"{' or '.join(backends_without(Messages))}", field="backend")

    @property
    def tokenizer(self):
        """Not available: the API tokenizes on its side."""
        raise self._no_tokens("this study")

    @property
    def vocab_size(self) -> int:
        """Not available: the API tokenizes on its side."""
        raise self._no_tokens("this study")

    def next_token_logprobs(self, prompts, prefix_len: int = 0):
        """Not available: use ``answer_top``."""
        raise self._no_tokens("next-token log-probs over token ids")

    def generate(self, prompts, max_new_tokens: int):
        """Not available: use ``complete``."""
        raise self._no_tokens("generation from token ids")


def supports(backend: Backend, capability: type) -> bool:
    """Whether the backend declares ``capability`` (a backend, or a wrapper around one, that
    declares nothing has none)."""
    return capability in getattr(type(backend), "capabilities", frozenset())


def requires(backend: Backend, capability: type, *, needed_for: str = "this study"):
    """``backend`` itself when it declares ``capability``; else a one-line `CapabilityError`
    naming the backend and the registered backends that declare it."""
    if supports(backend, capability):
        return backend
    from calimon.scoring.backends.registry import backends_with

    what = CAPABILITY_NAMES.get(capability, capability.__name__)
    able = backends_with(capability)
    instead = f"use --backend {' or '.join(able)}" if able else "no registered backend has it"
    raise CapabilityError(f"{needed_for} needs {what}, which the {type(backend).name!r} "
                          f"backend does not provide; {instead}", field="backend")


__all__ = ["AllowedTokens", "Backend", "BackendBase", "CAPABILITY_NAMES", "CapabilityError", "Constrained",
           "HiddenStates",
           "LocalWeights", "Messages", "MessagesBackend", "Sampling", "requires", "supports"]
