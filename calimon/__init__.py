"""calimon: calibrated, span-level LLM misbehavior monitors."""

from __future__ import annotations

import functools

__all__ = ["__version__"]


@functools.cache
def installed_version() -> str:
    """calimon's version from the installed package's metadata (a wheel's, or an editable
    install's), which run folders, policies, maps, heads and the service record; for a source
    tree that was never installed, the version in its pyproject.toml with ``+source`` (local
    version label), else ``0+unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("calimon")
    except PackageNotFoundError:
        return _source_tree_version()


def _source_tree_version() -> str:
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"
    return f"{project.get('version', '0')}+source" if project.get("name") == "calimon" \
        else "0+unknown"


def __getattr__(name: str):  # PEP 562: the version is read on first use, not at import
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
