"""Inspect's entry point for calimon (``[project.entry-points.inspect_ai]`` in pyproject.toml):
importing it registers ``calimon/monitor_scorer`` and ``calimon/monitor_approver``, and, with the
``scout`` extra, ``calimon/monitor_scanner`` once Inspect Scout is imported (Scout imports
itself before it looks a scanner up), so approval policy files, ``inspect eval --approval``,
``inspect score --scorer`` and ``scout scan`` can name them.

Inspect imports this module at the start of every evaluation, so it imports Scout only where
Scout is in use: importing Scout costs seconds that an evaluation without it would pay too.
"""

from __future__ import annotations

import importlib.util

from calimon.integrations import inspect as _inspect  # noqa: F401  (registers on import)


def _register_scanner(_module) -> None:
    """Called when ``inspect_scout`` has been imported (at once if it already was)."""
    from calimon.errors import MissingExtraError

    try:
        from calimon.integrations import scout as _scout  # noqa: F401  (registers on import)
    except MissingExtraError:  # pragma: no cover - Scout without what the extra adds
        pass


if importlib.util.find_spec("inspect_scout") is not None:
    try:
        import wrapt
    except ImportError:  # pragma: no cover - Scout installed without calimon's scout extra
        _register_scanner(None)
    else:
        wrapt.register_post_import_hook(_register_scanner, "inspect_scout")
