"""Which backends exist: built-in names mapped to lazy "module:class" strings, plus the
`calimon.scoring.backends` entry-point group of third-party packages."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from calimon.errors import InputError

BACKENDS: dict[str, str] = {
    "transformers": "calimon.scoring.backends.transformers_backend:TransformersBackend",
    "vllm": "calimon.scoring.backends.vllm_backend:VLLMBackend",
    "http": "calimon.scoring.backends.http_backend:HTTPBackend",
    "chat": "calimon.scoring.backends.chat_backend:ChatBackend",
    "inspect": "calimon.scoring.backends.inspect_backend:InspectBackend",
}


def backend_table() -> dict[str, str]:
    """Every backend name (built-in first, then entry points) with its "module:class"."""
    table = dict(BACKENDS)
    for ep in entry_points(group="calimon.backends"):
        table.setdefault(ep.name, ep.value)
    return table


def backend_class(name: str):
    """The class registered under ``name`` (imported now)."""
    table = backend_table()
    if name not in table:
        raise InputError(f"unknown backend {name!r}; known: {sorted(table)}", field="backend")
    module, attr = table[name].split(":")
    return getattr(importlib.import_module(module), attr)


def backends_with(capability: type) -> list[str]:
    """Names of the built-in backends whose class declares ``capability``."""
    return [name for name in BACKENDS if capability in backend_class(name).capabilities]


def backends_without(capability: type) -> list[str]:
    """Names of the built-in backends whose class does not declare ``capability``."""
    return [name for name in BACKENDS if capability not in backend_class(name).capabilities]
