"""calimon inside the tools safety researchers already run (docs/integrations.md):

- `calimon.integrations.inspect`: an Inspect scorer (`monitor_scorer`) and approver
  (`monitor_approver`);
- `calimon.integrations.scout`: an Inspect Scout scanner (`monitor_scanner`) and a Scout
  validation set as a calimon benchmark, for ``calimon curve`` (`validation_benchmark`);
- `calimon.integrations.control`: a ControlArena monitor (`calimon_monitor_builder`), and
  ControlArena's honest and attack logs frozen into a labelled samples file
  (`control_benchmark`); ``calimon curve --benchmark 'LOG_DIR?label=eval_mode'`` reads the logs
  themselves (`calimon.data.inspect_log`).

Each scores in this process (`LocalMonitor`, from a policy file or a model name) or through a
``calimon serve`` server (`RemoteMonitor`), and answers with an `Assessment`. The third-party
packages are imported only by their own module (extras ``inspect``, ``scout``, ``control``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calimon.errors import InputError
from calimon.integrations.assessment import Assessment
from calimon.integrations.local import LocalMonitor
from calimon.integrations.remote import RemoteMonitor
from calimon.integrations.transcripts import sample_from_messages


def resolve_monitor(*, policy: str | Path | None = None, model: Any = None,
                    url: str | None = None, readout: str = "verdict", prompt: str | None = None,
                    calibration_map: str | Path | None = None, backend: Any = None,
                    store: str | Path | None = None, api_key: str | None = None,
                    force: bool = False) -> LocalMonitor | RemoteMonitor:
    """The monitor an integration's arguments name: exactly one of ``policy`` (a policy file:
    its model, readout, map and thresholds), ``model`` (with ``readout``, ``prompt`` and an
    optional ``calibration_map``; no decision) or ``url`` (a ``calimon serve`` server, which
    applies its own policy). ``model`` may be an Inspect model (a ``provider/model`` name or a
    ``Model``: `calimon.integrations.inspect_model`), which scores through the ``inspect``
    backend; with ``policy`` too, it is the model that serves the policy's monitor (checked
    against the policy's pin like any monitor)."""
    from calimon.integrations.inspect_model import inspect_backend, is_inspect_model

    on_inspect = is_inspect_model(model)
    given = [k for k, v in (("policy", policy), ("model", model), ("url", url))
             if v is not None and v != ""]
    if len(given) != 1 and not (on_inspect and given == ["policy", "model"]):
        raise InputError("name exactly one of policy=PATH, model=NAME or url=URL (an Inspect "
                         "model may serve a policy: policy=PATH, model=MODEL)"
                         + (f" (got {', '.join(given)})" if given else ""), field="monitor")
    if url:
        return RemoteMonitor(url, api_key=api_key)
    if on_inspect and backend is None:
        backend = inspect_backend(model)
    if policy:
        return LocalMonitor.from_policy(policy, calibration_map=calibration_map, prompt=prompt,
                                        backend=backend, store=store, force=force)
    name = backend.model_ref.name if on_inspect else str(model)
    return LocalMonitor.from_model(name, readout=readout, prompt=prompt,
                                   calibration_map=calibration_map, backend=backend,
                                   store=store, force=force)


__all__ = ["Assessment", "LocalMonitor", "RemoteMonitor", "resolve_monitor",
           "sample_from_messages"]
