"""YAML configs loaded into pydantic models (extra fields forbidden, versioned).

Configs are looked up by name in $CALIMON_CONFIGS, then the user folder's ``configs/``, then the
installed package's (`calimon.resources`: a wheel's copy, or ``configs/`` of the checkout).
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from calimon.errors import ConfigError
from calimon.resources import CONFIGS_ENV, config_roots, package_folder, searched

M = TypeVar("M", bound=BaseModel)
__all__ = ["CONFIGS_ENV", "config_names", "configs_root", "load_yaml_model", "named_config_path"]


def configs_root() -> Path:
    """The installed package's configs folder (a wheel's ``calimon/shipped/configs``, or
    ``configs/`` of the checkout); lookups by name search `config_roots` instead."""
    return package_folder("configs")


def config_names(kind: str, *, hidden: bool = True) -> list[str]:
    """Names (file stems) of the YAML configs in ``<root>/<kind>/`` of every configs root,
    sorted; [] if there are none. ``hidden=False`` leaves out the configs marked ``hidden: true``
    (test-only ones, such as the tiny-qwen3 model: usable by name, never listed or suggested to
    a user); of two files with one name, the one found first decides."""
    found: dict[str, Path] = {}
    for _, root in config_roots():
        folder = root / kind
        for p in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            found.setdefault(p.stem, p)
    return sorted(n for n, p in found.items() if hidden or not _marked_hidden(p))


def _marked_hidden(path: Path) -> bool:
    """Whether the config at ``path`` says ``hidden: true`` (one that cannot be read is not:
    loading it by name reports what is wrong)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(doc, dict) and doc.get("hidden") is True


def find_config(kind: str, name: str) -> Path | None:
    """``<root>/<kind>/<name>.yaml`` of the first configs root that has it, or None; a name
    that would leave the folder, or a link that does, is refused."""
    field = kind.removesuffix("s")
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(f"invalid {kind} config name {name!r}", field=field)
    for _, root in config_roots():
        path = root / kind / f"{name}.yaml"
        if path.is_file():
            folder = (root / kind).resolve()
            if not path.resolve().is_relative_to(folder):
                raise ConfigError(f"{kind} config {name!r} is a link that leaves {folder}",
                                  field=field)
            return path
    return None


def named_config_path(kind: str, name: str) -> Path:
    """``<kind>/<name>.yaml`` of the first configs root that has it; ConfigError naming the
    known names and the folders searched when none has."""
    path = find_config(kind, name)
    if path is None:
        import difflib

        known = config_names(kind, hidden=False)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        folders = [(what, root / kind) for what, root in config_roots()]
        raise ConfigError(f"unknown {kind.removesuffix('s')} {name!r}{hint}; known: {known}; "
                          f"{searched(folders, CONFIGS_ENV)}", field=kind.removesuffix("s"))
    return path


def load_yaml_model(path: Path, model: type[M]) -> M:
    """Parse a YAML file into `model`; errors name the file, line (where known) and field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read ({getattr(exc, 'strerror', None) or exc})",
                          path=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:  # ValueError: huge ints
        mark = getattr(exc, "problem_mark", None)
        why = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line
        raise ConfigError(f"not valid YAML ({why})", path=str(path),
                          line=mark.line + 1 if mark else None) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a YAML mapping at the top level", path=str(path))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        raise ConfigError(f"{err['msg']} (got {reprlib.repr(err.get('input')):.80})", path=str(path),
                          line=_line_of(text, err["loc"]), field=field) from None


def _line_of(text: str, loc: tuple) -> int | None:
    """Best-effort line of the first key of `loc` in the YAML text."""
    if not loc or not isinstance(loc[0], str):
        return None
    for i, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(f"{loc[0]}:"):
            return i
    return None
