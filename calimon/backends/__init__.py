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
    return cls(resolve_model(spec.model), **options)


__all__ = ["BACKENDS", "OPTIONS", "Backend", "BackendSpec", "CapabilityError", "HiddenStates",
           "LocalWeights", "backend_class", "backend_options", "backends_with", "build_backend",
           "check_options", "requires", "supports"]
