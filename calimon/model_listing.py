"""`calimon models list`: which configured models can run here, without loading any."""

from __future__ import annotations

import importlib.util

from calimon.config import config_names
from calimon.data.paths import calimon_home
from calimon.errors import CalimonError
from calimon.models import _candidates, load_model_config


def list_models(*, hidden: bool = False) -> list[dict[str, str]]:
    """One row per configured model (``name``, ``status``: ready / available / missing / api /
    bad-config, ``detail``), found without loading any weights; test-only models (``hidden:
    true``, e.g. tiny-qwen3) only with ``hidden=True``."""
    rows = []
    for name in config_names("models", hidden=hidden):
        try:
            cfg = load_model_config(name)
        except CalimonError as exc:
            rows.append({"name": name, "status": "bad-config", "detail": str(exc)})
            continue
        if cfg.source.kind == "api":
            api = cfg.api
            status, detail = "api", (f"served at {api.base_url if api else '--base-url'}; "
                                     "score with --backend chat")
        elif cfg.source.kind in ("wheel-gguf", "built"):
            converted = (calimon_home() / "models" / name / "calimon-conversion.json").is_file()
            installed = importlib.util.find_spec(cfg.source.package or "") is not None
            # a wheel's model resolves only while its package is installed, converted or not
            converted = converted and (installed or cfg.source.kind == "built")
            status = "ready" if converted else ("available" if installed else "missing")
            verb = "built" if cfg.source.kind == "built" else "converted"
            detail = (f"{verb} cache" if converted else
                      f"{verb} on first use" if installed else f"run {cfg.source.install_hint()}")
        else:
            found = next((c for c in _candidates(cfg)
                          if c is not None and (c / "config.json").is_file()), None)
            status = "ready" if found else "missing"
            detail = str(found) if found else f"weights for {cfg.hf_id} not found locally"
        rows.append({"name": name, "status": status, "detail": detail})
    return rows
