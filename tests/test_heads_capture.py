import numpy as np
import pytest
import torch
from conftest import toy_samples

from calimon.errors import InputError
from calimon.prompts import load_prompt
from calimon.scoring.monitor import Monitor
from calimon.scoring.probes.capture import CaptureSpec, LayerCollector


def test_spec_validates_layers_and_pooling():
    with pytest.raises(InputError, match="pooling"):
        CaptureSpec(layers=(1,), pooling=("median",))
    with pytest.raises(InputError, match="layers"):
        CaptureSpec(layers=(-1,))
    assert CaptureSpec(layers=(np.int64(3),)).layers == (3,)


def test_collector_pools_only_the_response_rows():
    spec = CaptureSpec(layers=(2,), pooling=("last", "mean", "max"), token_layers=(2,))
    h = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    col = LayerCollector(spec, spans=[(1, 3), (2, 2)], lengths=[4, 5])
    col.hook(2)(None, (), h)
    got = col.result()
    pooled = got["pooled"][:, :, 0]
    assert np.allclose(pooled[0, 0], h[0, 3]) and np.allclose(pooled[1, 0], h[1, 4])
    assert np.allclose(pooled[0, 1], h[0, 1:3].mean(0))
    assert np.allclose(pooled[0, 2], h[0, 1:3].amax(0))
    assert np.all(pooled[1, 1:] == 0)  # empty response: zero vector
    assert got["tokens"][0].shape == (2, 1, 3) and got["tokens"][1].shape == (0, 1, 3)


def _encoded(backend, n_pairs=2):
    mon = Monitor(backend, load_prompt("direct"), "verdict")
    enc = [mon.encoder.encode(s.request, s.response) for s in toy_samples(n_pairs)]
    return mon.encoder.prefix_len, enc


@pytest.mark.model
def test_capture_logits_and_states_equal_a_plain_forward(smol_backend):
    prefix_len, enc = _encoded(smol_backend)
    n_layers = smol_backend.num_layers
    spec = CaptureSpec(layers=(0, 5, n_layers - 1), pooling=("last", "mean", "max"),
                       token_layers=(5,))
    got = smol_backend.capture([e.ids for e in enc], prefix_len, spec,
                               [(e.response_start, e.response_end) for e in enc])
    plain = smol_backend.next_token_logprobs([e.ids for e in enc], prefix_len)
    assert np.array_equal(got.logprobs, plain)
    for i, e in enumerate(enc):
        with torch.inference_mode():
            out = smol_backend.model(torch.tensor([e.ids]), output_hidden_states=True)
        ref_lp = torch.log_softmax(out.logits[0, -1].float(), -1).numpy()
        assert np.abs(np.exp(got.logprobs[i]) - np.exp(ref_lp)).max() < 1e-4
        for j, layer in enumerate(spec.layers):
            hs = out.hidden_states[layer][0].numpy()
            resp = hs[e.response_start:e.response_end]
            scale = np.abs(hs).max()
            for k, ref in enumerate((hs[-1], resp.mean(0), resp.max(0))):
                assert np.abs(got.pooled[i, k, j] - ref).max() < 1e-3 * scale
        toks = got.tokens[i]
        assert toks.shape == (e.response_end - e.response_start, 1, smol_backend.hidden_size)
        ref = out.hidden_states[5][0, e.response_start:e.response_end].numpy()
        assert np.abs(toks[:, 0] - ref).max() < 1e-3 * np.abs(ref).max()


@pytest.mark.model
def test_capture_refuses_bad_spans_and_layers(smol_backend):
    prefix_len, enc = _encoded(smol_backend, 1)
    ids = [e.ids for e in enc]
    with pytest.raises(InputError, match="spans"):
        smol_backend.capture(ids, prefix_len, CaptureSpec(layers=(1,)), [(0, 3)] * len(ids))
    with pytest.raises(InputError, match="layers"):
        smol_backend.capture(ids, prefix_len, CaptureSpec(layers=(999,)),
                             [(e.response_start, e.response_end) for e in enc])
