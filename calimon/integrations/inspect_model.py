"""An Inspect model as the monitor of an integration: ``model=`` given an Inspect model name
(``provider/model``, as ``inspect eval --model`` takes it) or an Inspect ``Model`` object, or
``model_role=`` naming an eval's model role, is scored through the ``inspect`` backend
(`calimon.scoring.backends.inspect_backend`). A calimon model (a config name, a folder, a probe
bundle) keeps its own backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calimon.errors import InputError


def is_inspect_model(model: Any) -> bool:
    """Whether ``model`` names an Inspect model: an Inspect ``Model``, or a ``provider/model``
    string that is neither a calimon model config, a folder on this machine nor a probe."""
    if model is None or isinstance(model, Path):
        return False
    if not isinstance(model, str):
        return type(model).__module__.startswith("inspect_ai.")
    from calimon.config import config_names

    return ("/" in model and not model.startswith(("probe:", ".", "/", "~"))
            and model not in config_names("models") and not Path(model).expanduser().exists())


def inspect_backend(model: Any, **options: Any):
    """The ``inspect`` backend of ``model`` (an Inspect model name or ``Model``), with
    ``options`` (`calimon.scoring.backends.options.InspectOptions`, checked)."""
    from calimon.models import describe_api_model
    from calimon.scoring.backends.inspect_backend import InspectBackend
    from calimon.scoring.backends.options import check_options

    opts = check_options("inspect", options)
    if isinstance(model, str):
        return InspectBackend(describe_api_model(model), **opts)
    return InspectBackend(describe_api_model(str(model)), inspect_model=model, **opts)


def role_model(model: Any, role: str) -> Any:
    """The Inspect ``Model`` bound to ``role`` in the running eval (``model_roles``); unbound:
    ``model`` (a name or ``Model``), or without one a one-line error naming the role (a
    monitor is never silently the model under evaluation). Call it where the eval's context
    is (a scorer's or approver's coroutine)."""
    from inspect_ai.model import get_model

    try:
        return get_model(model, role=role, required=model is None)
    except Exception as exc:  # PrerequisiteError: the role is required and unbound
        raise InputError(f"model_role={role!r}: {exc} (bind it with eval(model_roles="
                         f"{{{role!r}: MODEL}}) or inspect eval --model-role {role}=MODEL, or "
                         "give model=)", field="model_role") from None


__all__ = ["inspect_backend", "is_inspect_model", "role_model"]
