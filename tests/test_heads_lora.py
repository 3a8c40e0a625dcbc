"""The LoRA verdict baseline (calimon.studies.heads.lora) on the real embedded model; needs peft (the
``lora`` extra: CI runs it in .venv-lora)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from conftest import toy_samples

from calimon.errors import MissingExtraError

HAS_PEFT = importlib.util.find_spec("peft") is not None


@pytest.mark.model
def test_left_padded_batches_read_the_answer_position_of_every_row(smol_backend):
    """The training batch (left padding, explicit positions, logits at the last column only)
    gives each row the margin of that row scored alone, and finite gradients."""
    import torch

    from calimon.numerics.readouts import answer_token_ids
    from calimon.prompts import encoder_for, load_prompt
    from calimon.studies.heads.lora import _batch_tensors, verdict_margin

    model = smol_backend.model
    enc = encoder_for(smol_backend, load_prompt("direct"), "verdict", 512)
    encoded = [enc.encode(s.request, s.response) for s in toy_samples(2)]
    assert len({len(e.ids) for e in encoded}) > 1  # rows of different lengths get padding
    pos, neg = (torch.tensor(a) for a in answer_token_ids(smol_backend.tokenizer, "verdict"))

    def margins(rows):
        ids, mask, positions = _batch_tensors(rows, 0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                    logits_to_keep=1).logits[:, -1]
        return verdict_margin(out, pos, neg)

    with torch.no_grad():
        alone = torch.cat([margins([e]) for e in encoded])
        batched = margins(encoded)
    assert torch.allclose(alone, batched, atol=1e-3), (alone, batched)
    emb = model.get_input_embeddings().weight
    was = emb.requires_grad
    emb.requires_grad_(True)
    try:
        margins(encoded).sum().backward()
        assert emb.grad is not None and torch.isfinite(emb.grad).all()
    finally:
        emb.grad = None
        emb.requires_grad_(was)


def test_length_batches_cover_every_row_once_in_similar_lengths():
    from calimon.studies.heads.lora import length_batches

    lengths = [5, 100, 7, 98, 6, 99, 101, 4]
    batches = length_batches(lengths, 2, np.random.default_rng(0))
    flat = sorted(int(i) for b in batches for i in b)
    assert flat == list(range(8))
    assert all(abs(lengths[b[0]] - lengths[b[-1]]) <= 3 for b in batches)
    again = length_batches(lengths, 2, np.random.default_rng(0))
    assert [list(b) for b in batches] == [list(b) for b in again]


@pytest.mark.skipif(HAS_PEFT, reason="peft is installed here")
def test_missing_peft_names_the_install_line():
    from calimon.studies.heads.lora import _peft

    with pytest.raises(MissingExtraError, match=r"calimon\[lora\]"):
        _peft()


@pytest.mark.lora
@pytest.mark.model
def test_lora_training_moves_the_verdict_and_leaves_the_judge_intact(smol_backend):
    import torch

    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor
    from calimon.studies.heads.lora import LoraSettings, train_lora_verdict

    samples = toy_samples(2)
    prompt = load_prompt("direct")
    before = {n: p.detach().clone() for n, p in smol_backend.model.named_parameters()}
    settings = LoraSettings(r=2, alpha=4, lr=5e-3, epochs=1, batch_size=2,
                            max_input_tokens=512, seed=0)
    run = train_lora_verdict(smol_backend, prompt, samples, settings)
    assert run.n_train == 4 and len(run.losses) == 2 and np.isfinite(run.losses).all()
    assert len(run.adapter_sha256) == 64
    assert run.backend.model_ref.revision.endswith(run.adapter_sha256[:12])
    # the judge the adapters were trained on is unchanged (peft works on a copy)
    for name, p in smol_backend.model.named_parameters():
        assert torch.equal(p, before[name]), name
    base = Monitor(smol_backend, prompt, "verdict", max_input_tokens=512).score(samples)
    tuned = Monitor(run.backend, prompt, "verdict", max_input_tokens=512).score(samples)
    assert all(v.status == "ok" for v in base + tuned)
    assert max(abs(a.p_raw - b.p_raw) for a, b in zip(base, tuned, strict=True)) > 1e-3
    # deterministic given the seed
    again = train_lora_verdict(smol_backend, prompt, samples, settings)
    assert again.adapter_sha256 == run.adapter_sha256


@pytest.mark.lora
@pytest.mark.model
def test_saved_adapters_score_as_the_trained_run(smol_backend, tmp_path):
    from calimon.errors import InputError
    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor
    from calimon.studies.heads.lora import LoraSettings, load_lora_verdict, train_lora_verdict

    samples = toy_samples(2)
    prompt = load_prompt("direct")
    settings = LoraSettings(r=2, alpha=4, lr=5e-3, epochs=1, batch_size=2,
                            max_input_tokens=512, seed=0)
    run = train_lora_verdict(smol_backend, prompt, samples, settings, save_dir=tmp_path / "ad")
    assert (tmp_path / "ad" / "adapter_model.safetensors").is_file()
    loaded, digest = load_lora_verdict(smol_backend, tmp_path / "ad")
    assert digest == run.adapter_sha256
    assert loaded.model_ref.revision == run.backend.model_ref.revision
    a = Monitor(run.backend, prompt, "verdict", max_input_tokens=512).score(samples)
    b = Monitor(loaded, prompt, "verdict", max_input_tokens=512).score(samples)
    assert max(abs(x.p_raw - y.p_raw) for x, y in zip(a, b, strict=True)) < 1e-5
    with pytest.raises(InputError, match="adapter_config.json"):
        load_lora_verdict(smol_backend, tmp_path)
