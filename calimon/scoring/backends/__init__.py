"""Model backends: batch in, batch out. Heavy imports happen inside each backend module.

`Backend` (calimon.scoring.backends.base) is the contract; `build_backend(spec)` is the one place a
backend is made, from a JSON-able spec (backend name, model, options). Like Inspect's
`get_model`, it is memoized: the same spec gives the same backend object within a process, so
a model loads once however many studies score with it; `drop_backends()` closes and forgets
them (called at exit). BACKENDS maps names to lazy "module:class" strings; third parties add
entries through the `calimon.scoring.backends` entry-point group.
"""

from __future__ import annotations

import atexit
import json
import threading
from typing import Any, Protocol

from calimon.errors import InputError
from calimon.scoring.backends.base import (
    AllowedTokens,
    Backend,
    CapabilityError,
    Constrained,
    HiddenStates,
    LocalWeights,
    Messages,
    Remote,
    Sampling,
    requires,
    supports,
)
from calimon.scoring.backends.options import OPTIONS, backend_options, check_options
from calimon.scoring.backends.registry import BACKENDS, backend_class, backends_with


class BackendSpec(Protocol):
    """What `build_backend` reads from a spec (`calimon.scoring.engines.MonitorSpec` has these)."""

    model: str
    backend: str
    options: dict[str, Any]


_LOADED: dict[tuple[type, str], Backend] = {}
_LOADED_LOCK = threading.Lock()


def backend_key(spec: BackendSpec, options: dict[str, Any] | None = None) -> tuple[type, str]:
    """What makes two specs the same backend: the class registered under its name (a name
    registered anew is another backend), its model and its checked options (``options``:
    already checked ones, else checked here)."""
    if options is None:
        options = check_options(spec.backend, spec.options)
    return (backend_class(spec.backend),
            json.dumps([spec.backend, spec.model, options], sort_keys=True, default=str))


def build_backend(spec: BackendSpec, *, shared: bool = True) -> Backend:
    """The backend ``spec`` describes: ``spec.backend`` names the class, ``spec.model`` the
    model (a config name or a folder), ``spec.options`` its checked options. No weights load
    here: every backend loads on first use.

    ``shared`` (default): the backend already built in this process for an equal spec, if any
    (callers must not close it; `drop_backends` does); False: a new one the caller owns.

    A spec with ``offline`` set gets it wrapped (`calimon.scoring.backends.offline`: model calls
    refused). Nothing is contacted here: a study checks a remote server when it starts
    (`MonitorSpec.build_backend`)."""
    from calimon.scoring.backends.offline import offline_backend

    cls = backend_class(spec.backend)
    options = check_options(spec.backend, spec.options)
    if not shared:
        backend = cls(model_for(spec), **options)
    else:
        key = backend_key(spec, options)
        with _LOADED_LOCK:
            if key not in _LOADED:
                _LOADED[key] = cls(model_for(spec), **options)
            backend = _LOADED[key]
    if getattr(spec, "offline", False):
        return offline_backend(backend, owns=not shared)
    return backend


def is_shared(backend: Backend) -> bool:
    """Whether ``backend`` is one `build_backend` keeps for the process (so not the caller's
    to close)."""
    return any(b is backend for b in _LOADED.values())


def release(backend: Backend) -> None:
    """Done with ``backend``: close it unless it is shared (a shared one stays loaded for the
    next caller until `drop_backends`)."""
    if not is_shared(backend):
        backend.close()


def drop_backends(spec: BackendSpec | None = None, *, keep: tuple[Backend, ...] = ()) -> int:
    """Close and forget the process's shared backend for ``spec`` (None: all of them but
    those in ``keep``), so the next `build_backend` loads anew; returns how many were dropped."""
    with _LOADED_LOCK:
        keys = ([k for k in [backend_key(spec)] if k in _LOADED] if spec is not None else
                [k for k, b in _LOADED.items() if not any(b is x for x in keep)])
        dropped = [_LOADED.pop(k) for k in keys]
    for backend in dropped:
        backend.close()
    return len(dropped)


atexit.register(drop_backends)


def model_for(spec: BackendSpec):
    """The model ``spec`` names, as its backend sees it: local weights found (and converted
    once) for a token backend; for a backend that takes chat messages, the served model
    described from its config, no weights needed."""
    from calimon.models import describe_api_model, resolve_model

    if supports_class(backend_class(spec.backend), Messages):
        return describe_api_model(spec.model, spec.options.get("served_model"))
    return resolve_model(spec.model)


def check_backend_model(backend: Backend, resolved) -> None:
    """A backend handed to a study must hold the model its settings name (the study records
    that model in its provenance): one-line InputError otherwise."""
    got = getattr(getattr(backend, "model_ref", None), "name", None)
    if got is not None and got != resolved.name:
        raise InputError(f"the backend given holds model {got!r}; the settings name "
                         f"{resolved.name!r}", field="model")


def supports_class(cls: type, capability: type) -> bool:
    """Whether the backend class declares ``capability``."""
    return capability in getattr(cls, "capabilities", frozenset())


__all__ = ["AllowedTokens", "BACKENDS", "OPTIONS", "Backend", "BackendSpec", "CapabilityError", "Constrained",
           "HiddenStates",
           "LocalWeights", "Messages", "Remote", "Sampling", "backend_class", "backend_key", "check_backend_model", "backend_options",
           "backends_with", "build_backend", "check_options", "drop_backends", "is_shared",
           "model_for", "release", "requires", "supports"]
