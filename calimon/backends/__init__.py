"""Model backends: batch in, batch out. Heavy imports happen inside each backend module.

BACKENDS maps names to lazy "module:class" strings; third parties add entries through the
`calimon.backends` entry-point group.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from calimon.errors import InputError

BACKENDS: dict[str, str] = {
    "transformers": "calimon.backends.transformers_backend:TransformersBackend",
    "vllm": "calimon.backends.vllm_backend:VLLMBackend",
    "http": "calimon.backends.http_backend:HTTPBackend",
}


def backend_class(name: str):
    table = dict(BACKENDS)
    for ep in entry_points(group="calimon.backends"):
        table.setdefault(ep.name, ep.value)
    if name not in table:
        raise InputError(f"unknown backend {name!r}; known: {sorted(table)}", field="backend")
    module, attr = table[name].split(":")
    return getattr(importlib.import_module(module), attr)
