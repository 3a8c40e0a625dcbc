"""YAML configs loaded into pydantic models (extra fields forbidden, versioned).

Configs live in the top-level `configs/` folder of the checkout, or in $CALIMON_CONFIGS.
"""

from __future__ import annotations

import os
import reprlib
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from calimon.errors import ConfigError

CONFIGS_ENV = "CALIMON_CONFIGS"
M = TypeVar("M", bound=BaseModel)


def configs_root() -> Path:
    """The configs folder: $CALIMON_CONFIGS if set, else ``configs/`` of the checkout."""
    if os.environ.get(CONFIGS_ENV):
        return Path(os.environ[CONFIGS_ENV])
    return Path(__file__).resolve().parents[1] / "configs"


def config_names(kind: str, *, hidden: bool = True) -> list[str]:
    """Names (file stems) of the YAML configs in ``configs/<kind>/``, sorted; [] if no such
    folder. ``hidden=False`` leaves out the configs marked ``hidden: true`` (test-only ones,
    such as the tiny-qwen3 model: usable by name, never listed or suggested to a user)."""
    folder = configs_root() / kind
    paths = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    return [p.stem for p in paths if hidden or not _marked_hidden(p)]


def _marked_hidden(path: Path) -> bool:
    """Whether the config at ``path`` says ``hidden: true`` (one that cannot be read is not:
    loading it by name reports what is wrong)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(doc, dict) and doc.get("hidden") is True


def named_config_path(kind: str, name: str) -> Path:
    """configs/<kind>/<name>.yaml; a name that would leave the folder is refused. An error
    names the field as a command's flag does: ``model`` for configs/models."""
    field = kind.removesuffix("s")
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(f"invalid {kind} config name {name!r}", field=field)
    path = configs_root() / kind / f"{name}.yaml"
    folder = (configs_root() / kind).resolve()
    if path.is_file() and not path.resolve().is_relative_to(folder):
        raise ConfigError(f"{kind} config {name!r} is a link that leaves {folder}",
                          field=field)
    if not path.is_file():
        import difflib

        known = config_names(kind, hidden=False)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        raise ConfigError(f"unknown {field} {name!r}{hint}; known: {known}", field=field)
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
