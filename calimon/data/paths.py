"""Where built benchmarks and source files live. Built data is never committed."""

from __future__ import annotations

import os
from pathlib import Path

from calimon.errors import DataSourceError

DATA_ENV = "CALIMON_DATA_DIR"
SOURCES_ENV = "CALIMON_SOURCES"
HOME_ENV = "CALIMON_HOME"


def calimon_home() -> Path:
    """calimon's cache folder: $CALIMON_HOME, else ``~/.cache/calimon``."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "calimon")


def data_dir() -> Path:
    """Root folder for built benchmarks: $CALIMON_DATA_DIR, else $CALIMON_HOME/data."""
    return Path(os.environ.get(DATA_ENV) or calimon_home() / "data")


def benchmark_dir(name: str) -> Path:
    """The folder of the built benchmark ``name`` under `data_dir`."""
    return data_dir() / name


def sources_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The folder of public source files: the flag, then $CALIMON_SOURCES, then ../shared/sources
    (relative to the working directory, then, when calimon runs from a source checkout, to the
    checkout)."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_dir():
            raise DataSourceError(f"--sources {path}: no such directory")
        return path
    if os.environ.get(SOURCES_ENV):
        path = Path(os.environ[SOURCES_ENV])
        if not path.is_dir():
            raise DataSourceError(f"${SOURCES_ENV}={path}: no such directory")
        return path
    from calimon.resources import checkout_root

    checkout = checkout_root()
    candidates = [Path.cwd() / ".." / "shared" / "sources",
                  *([checkout / ".." / "shared" / "sources"] if checkout else [])]
    for path in candidates:
        if path.is_dir():
            return path.resolve()
    raise DataSourceError(
        "no source directory: pass --sources DIR or set $CALIMON_SOURCES to a folder holding the "
        "public source files listed in benchmarks/amb-open/sources.json (default ../shared/sources)")
