"""Where calimon finds the files it reads at run time: configs, heads and the amb-open source
table. One lookup order for configs and heads alike:

1. an explicit flag (``--root`` of ``calimon heads``) or environment variable: ``$CALIMON_CONFIGS``
   (a folder laid out as ``configs/``), ``$CALIMON_HEADS_DIR`` (laid out as ``heads/``);
2. the user's folder, ``$CALIMON_USER_DIR`` (default ``$XDG_CONFIG_HOME/calimon``, else
   ``~/.config/calimon``): its ``configs/`` and ``heads/``, for a user's own models, prompts,
   policies and heads;
3. the installed package: in a wheel, ``calimon/shipped/`` (the build copies the checkout's
   ``configs/``, ``heads/`` and ``benchmarks/amb-open/sources.json`` there: setup.py); in a source
   checkout (an editable install), the checkout's top-level folders themselves.

A name is taken from the first place that has it; a listing shows every place, an earlier place
hiding a later one's file of the same name. New heads are written to `heads_write_dir`, never
into an installed package. docs/install.md describes the order for users.
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIGS_ENV = "CALIMON_CONFIGS"
HEADS_ENV = "CALIMON_HEADS_DIR"
USER_ENV = "CALIMON_USER_DIR"
PACKAGE = Path(__file__).resolve().parent
SHIPPED = PACKAGE / "shipped"  # the wheel's copy (setup.py); absent in a source checkout


def checkout_root() -> Path | None:
    """The source checkout this calimon runs from (an editable install, or the folder on
    PYTHONPATH), or None for an installed wheel."""
    if SHIPPED.is_dir():
        return None
    root = PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "configs").is_dir() else None


def package_folder(name: str) -> Path:
    """The installed package's ``configs``, ``heads`` or ``benchmarks`` folder: the wheel's
    ``calimon/shipped/NAME``, or ``NAME/`` of the source checkout."""
    checkout = checkout_root()
    return checkout / name if checkout is not None else SHIPPED / name


def user_dir() -> Path:
    """The user's folder: $CALIMON_USER_DIR, else $XDG_CONFIG_HOME/calimon, else
    ~/.config/calimon (it need not exist)."""
    if os.environ.get(USER_ENV):
        return Path(os.environ[USER_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "calimon"


def _roots(env: str, name: str) -> list[tuple[str, Path]]:
    places = []
    if os.environ.get(env):
        places.append((f"${env}", Path(os.environ[env]).expanduser()))
    places.append((f"user folder, ${USER_ENV}", user_dir() / name))
    places.append(("package", package_folder(name)))
    return places


def config_roots() -> list[tuple[str, Path]]:
    """The configs folders in lookup order, each as (what it is, folder)."""
    return _roots(CONFIGS_ENV, "configs")


def heads_roots() -> list[tuple[str, Path]]:
    """The heads folders in lookup order, each as (what it is, folder)."""
    return _roots(HEADS_ENV, "heads")


def searched(roots: list[tuple[str, Path]], env: str | None) -> str:
    """The places ``roots`` names, for an error message: one line naming each folder and the
    environment variables that move them (``env``, when not set, is named as such)."""
    shown = [f"{folder} ({what})" for what, folder in roots]
    unset = [] if not env or any(what == f"${env}" for what, _ in roots) else \
        [f"${env} (not set)"]
    return "looked in " + ", ".join(unset + shown)


def heads_write_dir() -> Path:
    """Where new heads and bundles go when no folder is given: $CALIMON_HEADS_DIR, else the
    source checkout's ``heads/``, else the user folder's ``heads/`` (never an installed
    package)."""
    if os.environ.get(HEADS_ENV):
        return Path(os.environ[HEADS_ENV]).expanduser()
    checkout = checkout_root()
    return checkout / "heads" if checkout is not None else user_dir() / "heads"


def benchmark_file(rel: str) -> Path:
    """A file of the package's ``benchmarks/`` folder (``amb-open/sources.json``)."""
    return package_folder("benchmarks") / rel
