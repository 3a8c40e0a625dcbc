"""Model backends: batch in, batch out. Heavy imports happen inside each backend module.

`Backend` (calimon.backends.base) is the contract; `build_backend(spec)` is the one place a
backend is made, from a JSON-able spec (backend name, model, options). BACKENDS maps names to
lazy "module:class" strings; third parties add entries through the `calimon.backends`
entry-point group.
"""

from __future__ import annotations

from typing import Any, Protocol

from calimon.backends.base import (
    Backend,
    CapabilityError,
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
    from calimon.models import resolve_model

    cls = backend_class(spec.backend)
    options = check_options(spec.backend, spec.options)
    if supports_class(cls, Messages):  # a served model: described, no local weights needed
        from calimon.models import describe_api_model

        return cls(describe_api_model(spec.model, options.get("served_model")), **options)
    return cls(resolve_model(spec.model), **options)


def supports_class(cls: type, capability: type) -> bool:
    """Whether the backend class declares ``capability``."""
    return capability in getattr(cls, "capabilities", frozenset())


__all__ = ["BACKENDS", "OPTIONS", "Backend", "BackendSpec", "CapabilityError", "HiddenStates",
           "LocalWeights", "Messages", "Sampling", "backend_class", "backend_options", "backends_with", "build_backend",
           "check_options", "requires", "supports"]
