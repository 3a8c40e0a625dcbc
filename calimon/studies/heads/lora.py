"""The fine-tuned verdict baseline: LoRA adapters (peft) on the judge model, trained so that its
verdict P(Yes) / (P(Yes) + P(No)) at the answer position predicts the label.

The prompt is the same verdict prompt the probes read. The loss is the class-balanced binary
cross-entropy of ``log P(yes forms) - log P(no forms)`` at the last position (the readout's own
answer-token sets), so the fine-tune changes the same number the verdict readout reports. After
training the adapters are merged and the merged model is scored by the ordinary backend (prefix
KV reuse included). Needs the ``lora`` extra: ``pip install 'calimon[lora]'``.
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from calimon.errors import InputError, MissingExtraError
from calimon.numerics.readouts import answer_token_ids
from calimon.prompts import PromptTemplate, encoder_for
from calimon.samples import Sample
from calimon.scoring.probes.head import balanced_weights


def _peft():
    try:
        import peft
    except ImportError:
        raise MissingExtraError("the LoRA baseline needs peft: pip install 'calimon[lora]' "
                                "(or pip install peft)") from None
    return peft


@dataclass(frozen=True)
class LoraSettings:
    """LoRA hyperparameters (rank, scaling, dropout, target modules) and the training schedule."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lr: float = 2e-4
    epochs: int = 1
    batch_size: int = 4
    max_input_tokens: int = 768
    seed: int = 0


@dataclass(frozen=True, eq=False)
class LoraRun:
    """A finished fine-tune: the backend around the merged model, the loss per step, its cost and
    the adapter's sha256."""

    backend: object = field(repr=False)  # a TransformersBackend around the merged model
    losses: tuple[float, ...]
    seconds: float
    n_train: int
    settings: LoraSettings
    adapter_sha256: str


def _batch_tensors(encoded, pad: int):
    """Left-padded ids, attention mask and position ids (counted from each row's first real
    token), so that every row's answer position is the last column."""
    import torch

    width = max(len(e.ids) for e in encoded)
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, e in enumerate(encoded):
        ids[row, width - len(e.ids):] = torch.tensor(e.ids)
        mask[row, width - len(e.ids):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def verdict_margin(last_logits, pos_ids, neg_ids):
    """log P(yes forms) - log P(no forms) from each row's logits at the answer position."""
    import torch

    lp = torch.log_softmax(last_logits.float(), -1)
    return torch.logsumexp(lp[:, pos_ids], -1) - torch.logsumexp(lp[:, neg_ids], -1)


def length_batches(lengths: Sequence[int], batch_size: int, rng) -> list[np.ndarray]:
    """Batches of similar length (less padding): a seeded shuffle, a stable sort by length,
    cut into ``batch_size`` rows, the batches in a seeded order."""
    order = rng.permutation(len(lengths))
    order = order[np.argsort(np.asarray(lengths)[order], kind="stable")]
    batches = [order[b:b + batch_size] for b in range(0, len(order), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def train_lora_verdict(backend, prompt: PromptTemplate, samples: Sequence[Sample],
                       settings: LoraSettings = LoraSettings(),
                       log: Callable[[str], None] = lambda m: None,
                       save_dir: str | Path | None = None) -> LoraRun:
    """Fit LoRA adapters on ``samples`` (pass the train split) and return a backend around the
    merged model. Deterministic given ``settings.seed`` (data order and adapter init).
    ``save_dir``: also write the adapters there (peft's ``adapter_config.json`` and
    ``adapter_model.safetensors``), which :func:`load_lora_verdict` reads back."""
    import torch

    peft = _peft()
    labelled = [s for s in samples if s.label is not None]
    y = np.array([bool(s.label) for s in labelled])
    if not labelled:
        raise InputError("expected labelled training samples", field="samples")
    weights = torch.tensor(balanced_weights(y), dtype=torch.float32)
    torch.manual_seed(settings.seed)
    tok = backend.tokenizer
    base = copy.deepcopy(backend.model)  # peft injects adapters in place; keep the judge intact
    cfg = peft.LoraConfig(r=settings.r, lora_alpha=settings.alpha,
                          lora_dropout=settings.dropout,
                          target_modules=list(settings.target_modules), bias="none")
    model = peft.get_peft_model(base, cfg)
    encoder = encoder_for(backend, prompt, "verdict", settings.max_input_tokens)
    encoded = [encoder.encode(s.request, s.response) for s in labelled]
    pos, neg = (torch.tensor(a) for a in answer_token_ids(tok, "verdict"))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.lr)
    rng = np.random.default_rng(settings.seed)
    losses: list[float] = []
    model.train()
    start = time.perf_counter()
    for epoch in range(settings.epochs):
        batches = length_batches([len(e.ids) for e in encoded], settings.batch_size, rng)
        for b, idx in enumerate(batches):
            ids, mask, positions = _batch_tensors([encoded[i] for i in idx], pad)
            # logits at the answer position only: the output layer is a fifth of this model
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                           logits_to_keep=1).logits[:, -1]
            margin = verdict_margin(logits, pos, neg)
            target = torch.tensor(y[idx], dtype=torch.float32)
            loss = (weights[idx] * torch.nn.functional.binary_cross_entropy_with_logits(
                margin, target, reduction="none")).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            log(f"epoch {epoch} batch {b}/{len(batches)}: loss {losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    model.eval()
    if save_dir is not None:
        model.save_pretrained(str(save_dir), safe_serialization=True)
    wrapped, digest = _merged_backend(backend, model)
    return LoraRun(wrapped, tuple(losses), seconds, len(labelled), settings, digest)


def _merged_backend(backend, model):
    """A backend around ``model`` (a peft model) merged, and the sha256 of its adapters."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        if "lora_" in name:
            h.update(name.encode())
            h.update(p.detach().numpy().tobytes())
    digest = h.hexdigest()
    merged = model.merge_and_unload()
    ref = backend.model_ref
    tuned = replace(ref, name=f"{ref.name}+lora", revision=f"{ref.revision}+lora-{digest[:12]}")
    from calimon.scoring.backends.transformers_backend import TransformersBackend

    return TransformersBackend.from_loaded(tuned, merged, backend.tokenizer), digest


def load_lora_verdict(backend, adapter_dir: str | Path):
    """A backend around the judge with the adapters that ``train_lora_verdict(save_dir=...)``
    wrote merged in, and the adapters' sha256 (the same digest the training run reported).
    The judge ``backend`` is left intact."""
    peft = _peft()
    folder = Path(adapter_dir)
    if not (folder / "adapter_config.json").is_file():
        raise InputError(f"{folder}: no adapter_config.json (expected a folder written by "
                         "train_lora_verdict(save_dir=...))", field="adapter_dir")
    model = peft.PeftModel.from_pretrained(copy.deepcopy(backend.model), str(folder))
    model.eval()
    return _merged_backend(backend, model)
