"""The mask-free scoring layout (calimon.scoring.backends.layout_attention, calimon.scoring.backends.packing):
the shared-prefix path runs sdpa's causal kernel with no explicit mask, batches of different
lengths are packed into one sequence, and both agree with plain forward passes in fp32."""

import types

import numpy as np
import pytest
import torch

from calimon.scoring.backends.capture import CaptureSpec
from calimon.scoring.backends.layout_attention import IMPLEMENTATION, layout_supported
from calimon.scoring.backends.transformers_backend import TransformersBackend

PREFIX = 12
SMALL = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "max_position_embeddings": 512, "tie_word_embeddings": True}


def _random_model(kind: str):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    cfg = (LlamaConfig if kind == "llama" else Qwen3Config)(**SMALL)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                            attn_implementation="sdpa").eval()


def _backend(model, **kwargs) -> TransformersBackend:
    from calimon.models import ModelConfig, ModelSource, ResolvedModel

    cfg = ModelConfig(version=1, name="random", source=ModelSource(kind="local"), path=".",
                      dtype="float32", max_input_tokens=512)
    ref = ResolvedModel("random", cfg.path, "random", cfg)
    return TransformersBackend.from_loaded(ref, model, types.SimpleNamespace(pad_token_id=0),
                                           **kwargs)


def _prompts(lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, SMALL["vocab_size"], (PREFIX,), generator=gen).tolist()
    return [prefix + torch.randint(0, SMALL["vocab_size"], (n - PREFIX,), generator=gen).tolist()
            for n in lengths]


def _plain(model, prompts):
    """Log-probs of a plain forward pass of each whole prompt, one at a time, under sdpa."""
    with torch.inference_mode():
        return np.stack([torch.log_softmax(model(torch.tensor([p])).logits[0, -1].float(), -1)
                         .numpy() for p in prompts])


class _SdpaCalls:
    """Records every call of torch's scaled_dot_product_attention (mask, causal flag, shapes)."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = torch.nn.functional.scaled_dot_product_attention

        def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
            self.calls.append((attn_mask, is_causal, q.shape, k.shape))
            return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        **kw)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)

    @property
    def tails(self):
        """The calls of the scoring passes (the shared prefix's own pass left out)."""
        return [c for c in self.calls if c[3][2] > PREFIX]


def _close(a, b, tol=1e-5):
    """Agreement within ``tol`` relative to the larger array's scale (fp32 rounding)."""
    return np.abs(a - b).max() <= tol * max(1.0, np.abs(b).max())


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_the_prefix_path_runs_causal_sdpa_without_a_mask_and_matches_a_plain_pass(
        kind, monkeypatch):
    model = _random_model(kind)
    prompts = _prompts([40, 33, 57])
    ref = _plain(model, prompts)
    backend = _backend(model)
    spy = _SdpaCalls(monkeypatch)
    got = backend.next_token_logprobs(prompts, PREFIX)
    assert model.config._attn_implementation == IMPLEMENTATION
    assert len(spy.tails) == 3 * SMALL["num_hidden_layers"]
    for mask, causal, q, k in spy.tails:  # the causal kernel: no mask, queries == keys
        assert mask is None and causal and q[2] == k[2]
    assert np.abs(np.exp(got) - np.exp(ref)).max() < 1e-5 and _close(got, ref)


def test_the_mask_path_is_kept_as_an_option_and_lower_right_agrees(monkeypatch):
    model = _random_model("llama")
    prompts = _prompts([40, 33])
    ref = _plain(model, prompts)
    lower = _backend(model, attention="lower_right").next_token_logprobs(prompts, PREFIX)
    spy = _SdpaCalls(monkeypatch)  # (a spy would hide sdpa from the lower-right bias)
    masked = _backend(model, attention="mask").next_token_logprobs(prompts, PREFIX)
    assert spy.tails and all(mask is not None for mask, *_ in spy.tails)
    for got in (masked, lower):
        assert np.abs(np.exp(got) - np.exp(ref)).max() < 1e-5 and _close(got, ref)


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_a_packed_batch_matches_single_prompts_logprobs_and_states(kind, monkeypatch):
    model = _random_model(kind)
    lengths = [40, 13, 57, 13, 26]
    prompts = _prompts(lengths, seed=1)
    spans = [(PREFIX + (n - PREFIX) // 3, n) for n in lengths]  # one a single token
    spec = CaptureSpec(layers=(0, 2, 3), token_layers=(1, 3))
    single = _backend(model, attention="mask").capture(prompts, PREFIX, spec, spans)
    packed_backend = _backend(model, max_batch_size=8)
    spy = _SdpaCalls(monkeypatch)
    packed = packed_backend.capture(prompts, PREFIX, spec, spans)
    assert packed_backend.forward_calls == 1
    # one sequence (batch 1), one causal call per document and layer, nothing padded
    assert len(spy.tails) == len(lengths) * SMALL["num_hidden_layers"]
    assert {q[0] for _, _, q, _ in spy.tails} == {1}
    assert sorted({q[2] for *_, q, _ in spy.tails}) == sorted(set(lengths))
    assert np.abs(np.exp(packed.logprobs) - np.exp(single.logprobs)).max() < 1e-5
    assert _close(packed.logprobs, single.logprobs)
    assert _close(packed.pooled, single.pooled)
    for a, b in zip(packed.tokens, single.tokens, strict=True):
        assert a.shape == b.shape and _close(a, b)
    verdict = packed_backend.next_token_logprobs(prompts, PREFIX)
    assert _close(verdict, single.logprobs)


def test_packing_off_pads_rows_without_a_mask_and_agrees(monkeypatch):
    model = _random_model("llama")
    prompts = _prompts([40, 13, 57])
    ref = _plain(model, prompts)
    spy = _SdpaCalls(monkeypatch)
    got = _backend(model, max_batch_size=8, packing=False).next_token_logprobs(prompts, PREFIX)
    assert len(spy.tails) == SMALL["num_hidden_layers"]  # one padded batch of 3 rows
    assert all(mask is None and q[0] == 3 for mask, _, q, _ in spy.tails)
    assert np.abs(np.exp(got) - np.exp(ref)).max() < 1e-5 and _close(got, ref)


def test_without_a_layout_the_implementation_is_sdpa_exactly():
    """Generation and every other caller of a switched model: left padding, sdpa's masks."""
    model = _random_model("qwen3")
    ids = torch.tensor(_prompts([30, 30]))
    mask = torch.ones_like(ids)
    mask[1, :7] = 0
    with torch.inference_mode():
        before = model(input_ids=ids, attention_mask=mask).logits
        _backend(model).next_token_logprobs(ids.tolist(), PREFIX)  # switches the model
        assert model.config._attn_implementation == IMPLEMENTATION
        after = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(before, after)


def test_only_plain_causal_decoders_are_switched():
    def model(**cfg):
        base = {"model_type": "llama", "_attn_implementation": "sdpa"}
        return types.SimpleNamespace(config=types.SimpleNamespace(**{**base, **cfg}))

    assert layout_supported(model())
    assert layout_supported(model(model_type="qwen3", layer_types=["full_attention"] * 2))
    assert not layout_supported(model(model_type="gemma3"))
    assert not layout_supported(model(model_type="qwen3",
                                      layer_types=["full_attention", "sliding_attention"]))
    assert not layout_supported(model(model_type="qwen2", use_sliding_window=True))
    assert not layout_supported(model(_attn_implementation="eager"))
    assert not layout_supported(model(_attn_implementation="flash_attention_2"))


@pytest.mark.model
def test_smollm2_real_prompts_packed_and_prefix_equal_a_plain_pass(smol, smol_backend):
    from conftest import toy_samples

    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor

    mon = Monitor(smol_backend, load_prompt("direct"), "verdict")
    enc = [mon.encoder.encode(s.request, s.response) for s in toy_samples(2)]
    prompts = [e.ids for e in enc]
    assert len({len(p) for p in prompts}) > 1
    ref = _plain(smol_backend.model, prompts)
    single = smol_backend.next_token_logprobs(prompts, mon.encoder.prefix_len)
    assert smol_backend.model.config._attn_implementation == IMPLEMENTATION
    packed = TransformersBackend.from_loaded(smol, smol_backend.model, smol_backend.tokenizer,
                                             max_batch_size=8)
    spec = CaptureSpec(layers=(0, 15, 29), token_layers=(29,))  # (30: hidden_states' is normed)
    spans = [(e.response_start, e.response_end) for e in enc]
    got = packed.capture(prompts, mon.encoder.prefix_len, spec, spans)
    assert packed.forward_calls == 1
    for lp in (single, got.logprobs):
        assert np.abs(np.exp(lp) - np.exp(ref)).max() < 1e-5 and _close(lp, ref)
    with torch.inference_mode():
        outs = [smol_backend.model(torch.tensor([p]), output_hidden_states=True).hidden_states
                for p in prompts]
    for i, e in enumerate(enc):
        for j, layer in enumerate(spec.layers):
            resp = outs[i][layer][0, e.response_start:e.response_end].numpy()
            assert _close(got.pooled[i, 1, j], resp.mean(0))
            if layer in spec.token_layers:
                assert _close(got.tokens[i][:, 0], resp)


@pytest.mark.parametrize("batch", [1, 8])
def test_without_a_shared_prefix_rows_and_packed_batches_match_a_plain_pass(batch):
    model = _random_model("qwen3")
    prompts = _prompts([30, 17, 44])
    ref = _plain(model, prompts)
    got = _backend(model, max_batch_size=batch).next_token_logprobs(prompts, 0)
    assert np.abs(np.exp(got) - np.exp(ref)).max() < 1e-5 and _close(got, ref)


def test_a_gpu_recomputes_a_prefix_too_short_to_pay_and_a_cpu_always_reuses_it():
    from calimon.scoring.backends.gpu_defaults import GPU_PREFIX_MIN_SHARE, reuse_prefix

    assert reuse_prefix("cpu", 218, [16000] * 8)
    assert reuse_prefix("cuda", 218, [600] * 8) and reuse_prefix("cuda:0", 218, [4000, 4000])
    assert not reuse_prefix("cuda", 218, [16000] * 8)
    edge = 218 / GPU_PREFIX_MIN_SHARE
    assert reuse_prefix("cuda", 218, [edge]) and not reuse_prefix("cuda", 218, [edge + 1])
    assert not reuse_prefix("cpu", 0, [100]) and not reuse_prefix("cuda", 5, [])


def test_a_batch_that_skips_its_prefix_gives_the_same_readings_and_states(monkeypatch):
    """Where the rule says recompute, the whole prompt runs as one tail: log-probs, pooled and
    per-token states (their spans shifted by the prefix) equal the prefix path's."""
    import calimon.scoring.backends.transformers_backend as tb

    model = _random_model("qwen3")
    lengths = [40, 13, 57, 26]
    prompts = _prompts(lengths, seed=2)
    spans = [(PREFIX + (n - PREFIX) // 3, n) for n in lengths]
    spec = CaptureSpec(layers=(0, 2), token_layers=(1,))
    reused = _backend(model, max_batch_size=8).capture(prompts, PREFIX, spec, spans)
    monkeypatch.setattr(tb, "reuse_prefix", lambda *a: False)
    backend = _backend(model, max_batch_size=8)
    recomputed = backend.capture(prompts, PREFIX, spec, spans)
    assert not backend._prefix_cache  # the prefix was never run on its own
    assert _close(recomputed.logprobs, reused.logprobs) and _close(recomputed.pooled, reused.pooled)
    for a, b in zip(recomputed.tokens, reused.tokens, strict=True):
        assert a.shape == b.shape and _close(a, b)
    assert _close(backend.next_token_logprobs(prompts, PREFIX), reused.logprobs)
