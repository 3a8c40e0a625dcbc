import numpy as np
import pytest
import torch
from conftest import toy_samples

from calimon.prompts import load_prompt
from calimon.scoring.monitor import Monitor, score_with_store
from calimon.scoring.store import RunStore

pytestmark = pytest.mark.model


@pytest.mark.parametrize("prompt, readout", [("direct", "verdict"), ("direct", "json"),
                                             ("evidence", "json")])
def test_probabilities_and_format_mass_sum_to_one(smol_backend, prompt, readout):
    verdicts = Monitor(smol_backend, load_prompt(prompt), readout).score(toy_samples(2))
    for v in verdicts:
        assert v.status == "ok" and 0.0 <= v.p_raw <= 1.0
        assert v.p_yes + v.p_no + v.format_mass == pytest.approx(1.0, abs=1e-6)
        assert v.p_raw == pytest.approx(v.p_yes / (v.p_yes + v.p_no))


def test_prefix_reuse_matches_a_plain_forward_pass(smol_backend):
    mon = Monitor(smol_backend, load_prompt("direct"), "verdict")
    prompts = [mon.encoder.encode(s.request, s.response).ids for s in toy_samples(3)]
    fast = smol_backend.next_token_logprobs(prompts, mon.encoder.prefix_len)
    with torch.inference_mode():
        ref = np.stack([torch.log_softmax(smol_backend.model(torch.tensor([p])).logits[0, -1]
                                          .float(), -1).numpy() for p in prompts])
    assert np.abs(np.exp(fast) - np.exp(ref)).max() < 1e-4


def test_the_stored_prefix_cache_is_only_read(smol_backend):
    mon = Monitor(smol_backend, load_prompt("direct"), "verdict")
    prompts = [mon.encoder.encode(s.request, s.response).ids for s in toy_samples(2)]
    first = smol_backend.next_token_logprobs(prompts, mon.encoder.prefix_len)
    (cache,) = smol_backend._prefix_cache.values()
    assert {layer.keys.shape[-2] for layer in cache.layers} == {mon.encoder.prefix_len}
    stored = [layer.keys.clone() for layer in cache.layers]
    again = smol_backend.next_token_logprobs(prompts[::-1], mon.encoder.prefix_len)[::-1]
    assert np.array_equal(first, again)
    assert all(torch.equal(a, layer.keys) for a, layer in zip(stored, cache.layers, strict=True))
    assert {layer.keys.shape[-2] for layer in cache.layers} == {mon.encoder.prefix_len}


def test_a_prefix_cache_layer_the_prefix_never_reached_stays_empty():
    from transformers.cache_utils import DynamicCache, DynamicLayer

    from calimon.scoring.backends.transformers_backend import _read_only_prefix

    cache = DynamicCache()
    k = torch.randn(1, 2, 5, 4)
    cache.update(k, k + 1, 0)
    cache.layers.append(DynamicLayer())  # configured deeper than the pass that ran
    view = _read_only_prefix(cache, rows=3)
    new = torch.randn(3, 2, 2, 4)
    keys, values = view.layers[0].update(new, new)
    assert keys.shape == (3, 2, 7, 4) and torch.equal(keys[:, :, :5], k.expand(3, -1, -1, -1))
    assert cache.layers[0].keys.shape == (1, 2, 5, 4)  # the stored prefix is untouched
    assert view.layers[1].get_seq_length() == 0 and view.layers[1] is not cache.layers[1]


def test_padded_batches_match_single_prompts_and_cpu_defaults_to_one(smol, smol_backend):
    from calimon.scoring.backends.transformers_backend import TransformersBackend

    assert smol_backend.max_batch_size == 1  # the CPU default
    batched = TransformersBackend.from_loaded(smol, smol_backend.model, smol_backend.tokenizer,
                                              max_batch_size=8)
    assert batched.max_batch_size == 8
    mon = Monitor(smol_backend, load_prompt("direct"), "verdict")
    prompts = [mon.encoder.encode(s.request, s.response).ids for s in toy_samples(3)]
    assert len({len(p) for p in prompts}) > 1  # different lengths: the batch is padded
    calls = batched.forward_calls
    padded = batched.next_token_logprobs(prompts, mon.encoder.prefix_len)
    assert batched.forward_calls == calls + 1
    single = smol_backend.next_token_logprobs(prompts, mon.encoder.prefix_len)
    assert np.abs(np.exp(padded) - np.exp(single)).max() < 1e-4


def test_second_run_makes_no_model_calls(smol_backend, tmp_path):
    samples = toy_samples(3)
    mon = Monitor(smol_backend, load_prompt("direct"), "json")
    with RunStore(tmp_path / "s.sqlite") as st:
        first = score_with_store(mon, samples, st)
        calls = smol_backend.forward_calls
        second = score_with_store(mon, samples, st)
        assert smol_backend.forward_calls == calls
        assert first == second and len(first) == len(samples)


class _FlakyBackend:
    """Delegates to the real backend but fails any batch that contains a poisoned prompt."""

    def __init__(self, inner, poison):
        self.inner, self.poison = inner, list(poison)
        self.model_ref, self.tokenizer = inner.model_ref, inner.tokenizer

    def next_token_logprobs(self, prompts, prefix_len=0):
        if any(list(p) == self.poison for p in prompts):
            raise RuntimeError("device fault")
        return self.inner.next_token_logprobs(prompts, prefix_len)


def test_a_failing_sample_is_recorded_as_error_never_scored(smol_backend, tmp_path):
    samples = toy_samples(2)
    mon = Monitor(smol_backend, load_prompt("direct"), "verdict")
    poison = mon.encoder.encode(samples[0].request, samples[0].response).ids
    flaky = Monitor(_FlakyBackend(smol_backend, poison), load_prompt("direct"), "verdict")
    with RunStore(tmp_path / "s.sqlite") as st:
        got = score_with_store(flaky, samples, st)
        bad = got[samples[0].transcript_hash]
        assert bad.status == "error" and bad.p_raw is None and "device fault" in bad.error
        assert all(got[s.transcript_hash].status == "ok" for s in samples[1:])
        assert st.missing(mon.key, [s.transcript_hash for s in samples]) == \
            [samples[0].transcript_hash]


def test_verbal_runs_on_a_token_backend_from_one_greedy_answer(smol_backend):
    samples = toy_samples(1)
    mon = Monitor(smol_backend, load_prompt("direct"), "verbal")
    got = mon.score(samples)
    assert len(got) == 2 and all(v.readout == "verbal" and v.text is not None for v in got)
    for v in got:  # a number in 0..100 is read as a probability, anything else is no score
        assert (v.status, v.p_raw is None) in {("ok", False), ("parse_failure", True)}
        assert v.p_raw is None or v.p_raw == pytest.approx(v.extra["stated"] / 100)
