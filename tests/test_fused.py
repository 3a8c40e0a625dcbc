"""The GPU levers of a scoring pass, checked on the CPU: the fused kernels' wiring
(`calimon.scoring.backends.fused`, with the CPU admitted and compilation replaced by the plain
function), the packed varlen attention's gather and offsets against the per-document loop (with
a reference varlen kernel), and the device defaults (`gpu_defaults`). The kernels themselves run
on a GPU only: benchmarks/gpu/run_gpu_perf.py --suite levers measures and checks them there."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calimon.scoring.backends import fused, gpu_defaults, layout_attention  # noqa: E402
from calimon.scoring.backends.layout_attention import Layout  # noqa: E402

TINY = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": 512, "rope_theta": 1e6, "rms_norm_eps": 1e-6}


def _model():
    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**TINY)).eval()


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits


@pytest.fixture
def cpu_admitted(monkeypatch):
    """The CPU counts as a fast device, and "compiling" returns the function itself."""
    monkeypatch.setattr(fused, "FAST_DEVICES", frozenset({"cpu"}))
    monkeypatch.setattr(fused, "_compile", lambda fn: fn)
    fused._compiled_kernels.cache_clear()
    fused._compiled_rope.cache_clear()
    yield
    fused._compiled_kernels.cache_clear()
    fused._compiled_rope.cache_clear()


def test_fused_kernels_compute_the_same_pass_and_unfuse_restores_the_model(cpu_admitted):
    model = _model()
    modeling = sys.modules[type(model).__module__]
    original_rope = modeling.apply_rotary_pos_emb
    ids = torch.randint(0, 300, (2, 11))
    ref = _logits(model, ids)
    assert fused.fuse(model, "compile") == "compile"
    # 2 layers x (input, post-attention, q and k norms) + the final norm; 2 MLPs
    patched = [m for m in model.modules() if "forward" in m.__dict__]
    assert len(patched) == 2 * 4 + 1 + 2
    assert modeling.apply_rotary_pos_emb is not original_rope
    torch.testing.assert_close(_logits(model, ids), ref, rtol=1e-5, atol=1e-5)
    assert fused.fuse(model, "compile") == "compile"  # a second call changes nothing
    fused.unfuse(model)
    assert [m for m in model.modules() if "forward" in m.__dict__] == []
    assert modeling.apply_rotary_pos_emb is original_rope
    torch.testing.assert_close(_logits(model, ids), ref, rtol=0, atol=0)


def test_fusing_off_a_fast_device_or_with_no_kernels_changes_nothing():
    model = _model()
    assert fused.fuse(model, "compile") == "none"  # a CPU model
    assert [m for m in model.modules() if "forward" in m.__dict__] == []
    assert fused.fuse(model, "none") == "none"
    with pytest.raises(ValueError, match="kernels must be one of"):
        fused.fuse(model, "fast")


def _reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale):
    """Causal attention per document, the triangle aligned to the lower right."""
    out = []
    for i in range(len(cu_q) - 1):
        qi = q[cu_q[i]:cu_q[i + 1]].transpose(0, 1)
        ki = k[cu_k[i]:cu_k[i + 1]].transpose(0, 1)
        vi = v[cu_k[i]:cu_k[i + 1]].transpose(0, 1)
        reps = qi.shape[0] // ki.shape[0]
        ki, vi = ki.repeat_interleave(reps, 0), vi.repeat_interleave(reps, 0)
        n, m = qi.shape[1], ki.shape[1]
        mask = torch.ones(n, m, dtype=torch.bool).tril(m - n)
        res = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask,
                                                               scale=scale)
        out.append(res.transpose(0, 1))
    return torch.cat(out)


def test_packed_varlen_attention_matches_the_per_document_loop(monkeypatch):
    monkeypatch.setattr(layout_attention, "VARLEN_DEVICES", frozenset({"cpu"}))
    monkeypatch.setattr(layout_attention, "varlen_kernel", lambda: _reference_varlen)
    prefix, docs = 5, ((0, 4), (4, 7), (11, 1))
    total = sum(n for _, n in docs)
    gen = torch.Generator().manual_seed(1)
    query = torch.randn(1, 4, total, 8, generator=gen)
    key = torch.randn(1, 2, prefix + total, 8, generator=gen)
    value = torch.randn(1, 2, prefix + total, 8, generator=gen)
    loop = layout_attention._packed(query, key, value, prefix, 0.3, Layout(docs=docs))
    one = layout_attention._packed(query, key, value, prefix, 0.3, Layout(docs=docs, varlen=True))
    assert one.shape == loop.shape == (1, total, 4, 8)
    torch.testing.assert_close(one, loop, rtol=1e-5, atol=1e-6)


def test_the_device_defaults():
    assert gpu_defaults.batch_tokens("cpu") == 8192 and gpu_defaults.max_batch_size("cpu") == 1
    assert gpu_defaults.batch_tokens("cuda:0") == gpu_defaults.GPU_BATCH_TOKENS
    assert gpu_defaults.max_batch_size("cuda") == gpu_defaults.GPU_MAX_BATCH
    assert gpu_defaults.kernels("auto", "cpu") == "none"
    assert gpu_defaults.kernels("compile", "cpu") == "compile"  # an explicit choice stands
    assert gpu_defaults.varlen(None, "cpu") is False and gpu_defaults.varlen(None, "cuda") is True
    assert gpu_defaults.varlen(False, "cuda") is False


def test_the_gpu_token_budget_shrinks_to_the_free_memory(monkeypatch):
    model = _model()
    per_token = gpu_defaults.activation_bytes(model.config, 4)
    assert per_token == 4 * (4 * 64 + 2 * (4 + 2 * 2) * 16 + 3 * 128)
    free = {"bytes": 10**12}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 0))
    assert gpu_defaults.batch_tokens("cuda", model) == gpu_defaults.GPU_BATCH_TOKENS
    free["bytes"] = 20_000 * per_token / gpu_defaults.FREE_MEMORY_SHARE
    assert gpu_defaults.batch_tokens("cuda", model) == 20_000
    free["bytes"] = 0  # never below the CPU budget
    assert gpu_defaults.batch_tokens("cuda", model) == gpu_defaults.CPU_BATCH_TOKENS
