"""Inspect's entry point for calimon (``[project.entry-points.inspect_ai]`` in pyproject.toml):
importing it registers ``calimon/monitor_scorer`` and ``calimon/monitor_approver`` (and, with the
``scout`` extra, ``calimon/monitor_scanner``), so approval policy files, ``inspect eval
--approval``, ``inspect score --scorer`` and ``scout scan`` can name them."""

from __future__ import annotations

from calimon.errors import MissingExtraError
from calimon.integrations import inspect as _inspect  # noqa: F401  (registers on import)

try:
    from calimon.integrations import scout as _scout  # noqa: F401
except MissingExtraError:  # Inspect without Scout
    pass
