"""``--offline``: a run answered from the run store alone, and a remote server checked first.

A scoring command with ``--offline`` gets its backend wrapped in an `OfflineBackend`: the
tokenizer, the model's name and revision and everything else a monitor needs to render its
prompts and find its readings in the store pass through, but any model call (log-probs,
generation, hidden states, a chat request, the torch module itself) is refused with one line:
a reading the store lacks is an error, never a silent call. A remote backend (`Remote`: the
http and chat backends) is not contacted at all.

Without ``--offline``, `check_reachable` makes a remote backend's server answer before the run
starts (`build_backend` calls it): a server that is down is an error naming its URL, even when
every reading happens to be in the store, rather than a run that looks like it scored.
"""

from __future__ import annotations

import functools
from typing import Any

from calimon.errors import BackendError, ServiceUnreachable
from calimon.scoring.backends.base import Remote, supports

# what calls the model: refused offline (the torch module too: a caller's own forward passes)
MODEL_CALLS = frozenset({"next_token_logprobs", "generate", "capture", "greedy_among",
                         "answer_top", "complete", "model"})


class OfflineReadingMissing(BackendError):
    """An --offline run needed a reading the run store does not hold."""

    exit_code = 2


class OfflineBackend:
    """``inner`` for everything but model calls (`MODEL_CALLS`), which raise
    `OfflineReadingMissing`. Its class carries ``inner``'s name and capabilities (made by
    `offline_backend`), so capability checks read as for ``inner``."""

    offline = True

    def __init__(self, inner: Any, *, owns: bool = False):
        self.inner = inner
        self.owns = owns  # close ``inner`` too (not the process's shared backend)
        self.forward_calls = 0  # never calls the model

    def __getattr__(self, attr: str) -> Any:
        if attr in MODEL_CALLS:
            raise OfflineReadingMissing(
                f"--offline: this run needs readings the run store does not hold "
                f"({self.describe()} was not called); run it without --offline to score them")
        return getattr(self.inner, attr)

    def describe(self) -> str:
        """What was left alone: the server (its URL) or the model."""
        return where(self.inner)

    def close(self) -> None:
        """Close ``inner`` when it is this wrapper's own (not the process's shared one)."""
        if self.owns:
            self.inner.close()


@functools.cache
def _offline_class(cls: type) -> type:
    return type(f"Offline{cls.__name__}", (OfflineBackend,),
                {"name": getattr(cls, "name", cls.__name__),
                 "capabilities": getattr(cls, "capabilities", frozenset())})


def offline_backend(inner: Any, *, owns: bool = False) -> OfflineBackend:
    """``inner`` wrapped for an --offline run (see `OfflineBackend`); ``owns``: closing the
    wrapper closes ``inner``."""
    return _offline_class(type(inner))(inner, owns=owns)


def is_offline(backend: Any) -> bool:
    """Whether ``backend`` answers from the store only."""
    return isinstance(backend, OfflineBackend)


def where(backend: Any) -> str:
    """``the http server at URL`` for a remote backend, else ``the model NAME``."""
    if supports(backend, Remote):
        return f"the {type(backend).name} server at {backend.server_url()}"
    name = getattr(getattr(backend, "model_ref", None), "name", None)
    return f"the model {name}" if name else "the model"


def check_reachable(backend: Any) -> None:
    """For a `Remote` backend: its server answers (any HTTP status will do), else a one-line
    `ServiceUnreachable` naming its URL and ``--offline``. Other backends: nothing to check."""
    if not supports(backend, Remote):
        return
    problem = backend.reach()
    if problem is not None:
        raise ServiceUnreachable(
            f"cannot reach {where(backend)} ({problem}); start the server or fix --base-url, "
            "or pass --offline to answer only from readings already in the run store")


def offline_line(backend: str, base_url: str | None, readings: int | None = None) -> str:
    """The first line of an --offline run (which found every reading in the store: one that
    did not stopped), for the backend named ``backend`` at ``base_url``."""
    from calimon.scoring.backends.registry import backend_class

    if Remote in getattr(backend_class(backend), "capabilities", frozenset()):
        left = f"the {backend} server{' at ' + base_url if base_url else ''} was not contacted"
    else:
        left = "the model was not called"
    count = f"{readings} of {readings} readings" if readings is not None else "every reading"
    return f"--offline: {count} from the run store; {left}"
