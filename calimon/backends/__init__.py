"""Model backends: batch in, batch out. Heavy imports happen inside each backend module.

`Backend` (calimon.backends.base) is the contract; `build_backend(spec)` is the one place a
backend is made, from a JSON-able spec (backend name, model, options). BACKENDS maps names to
lazy "module:class" strings; third parties add entries through the `calimon.backends`
entry-point group.
"""

from __future__ import annotations

from typing import Any, Protocol

from calimon.backends.base import (
    AllowedTokens,
    Backend,
    CapabilityError,
    Constrained,
    HiddenStates,
    LocalWeights,
    Messages,
    Sampling,
    requires,
    supports,
)
from calimon.backends.options import OPTIONS, backend_options, check_options
from calimon.backends.registry import BACKENDS, backend_class, backends_with


class BackendSpec(Protocol):
    """What `build_backend` reads from a spec (`calimon.engines.MonitorSpec` has these)."""

    model: str
    backend: str
    options: dict[str, Any]


def build_backend(spec: BackendSpec) -> Backend:
    """The backend ``spec`` describes: ``spec.backend`` names the class, ``spec.model`` the
    model (a config name or a folder), ``spec.options`` its checked options. No weights load
    here: every backend loads on first use."""

    cls = backend_class(spec.backend)
    options = check_options(spec.backend, spec.options)
    return cls(model_for(spec), **options)


def model_for(spec: BackendSpec):
    """The model ``spec`` names, as its backend sees it: local weights found (and converted
    once) for a token backend; for a backend that takes chat messages, the served model
    described from its config, no weights needed."""
    from calimon.models import describe_api_model, resolve_model

    if supports_class(backend_class(spec.backend), Messages):
        return describe_api_model(spec.model, spec.options.get("served_model"))
    return resolve_model(spec.model)


def supports_class(cls: type, capability: type) -> bool:
    """Whether the backend class declares ``capability``."""
    return capability in getattr(cls, "capabilities", frozenset())


__all__ = ["AllowedTokens", "BACKENDS", "OPTIONS", "Backend", "BackendSpec", "CapabilityError", "Constrained",
           "HiddenStates",
           "LocalWeights", "Messages", "Sampling", "backend_class", "backend_options", "backends_with", "build_backend",
           "check_options", "model_for", "requires", "supports"]
