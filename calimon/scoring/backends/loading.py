"""What the backends share about loading: the model folder's tokenizer (on first use), the
output-vocabulary size and answer ids of the token-id backends (vLLM, HTTP), and the end-of-turn
stop ids. Heavy imports happen inside the functions.
"""

from __future__ import annotations

import json

from calimon.models import ResolvedModel


def load_tokenizer(model: ResolvedModel):
    """The tokenizer stored in the model folder (transformers' AutoTokenizer)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model.path))


def causal_lm_class(model: ResolvedModel):
    """The causal-LM class that ``config.json``'s ``architectures`` names, taken from
    transformers' lazy top-level module so that only that model's own module is imported (the
    Auto classes' mapping and config machinery are skipped); ``AutoModelForCausalLM`` where the
    folder names no ``...ForCausalLM`` class this transformers has."""
    import transformers

    try:
        arch = json.loads((model.path / "config.json").read_text())["architectures"][0]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        arch = None
    if isinstance(arch, str) and arch.endswith("ForCausalLM"):
        cls = getattr(transformers, arch, None)
        if cls is not None:
            return cls
    return transformers.AutoModelForCausalLM


def model_vocab_size(model: ResolvedModel, tokenizer) -> int:
    """Rows of the output layer: config.json's vocab_size (may exceed the tokenizer's length)."""
    try:
        cfg = json.loads((model.path / "config.json").read_text())
        size = int(cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size") or 0)
    except (OSError, ValueError):
        size = 0
    return max(size, len(tokenizer))


def readout_token_ids(tokenizer) -> list[int]:
    """Every surface form of the answers of the verdict and json readouts (yes/no, true/false)."""
    from calimon.numerics.readouts import ANSWER_WORDS, answer_token_ids

    ids: set[int] = set()
    for readout in ANSWER_WORDS:
        pos, neg = answer_token_ids(tokenizer, readout)
        ids.update(int(i) for i in pos)
        ids.update(int(i) for i in neg)
    return sorted(ids)


def stop_token_ids(tokenizer) -> set[int]:
    """The ids that end a turn: the tokenizer's eos and `<|im_end|>`, where they exist."""
    return {t for t in (tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>"))
            if isinstance(t, int) and t >= 0}


class LazyTokenizer:
    """Mixin: `tokenizer` loads `self.model_ref`'s tokenizer on first use, unless `_tokenizer`
    was already set (a tokenizer passed in)."""

    model_ref: ResolvedModel
    _tokenizer = None

    @property
    def tokenizer(self):
        """The model's tokenizer, loaded on first use."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.model_ref)
        return self._tokenizer


class TokenIdVocab(LazyTokenizer):
    """Mixin of the backends that read log-probs for chosen token ids (vLLM, HTTP): the full
    vocabulary size and the readout answer ids, each computed once."""

    _vocab_size: int | None = None
    _answer_ids: list[int] | None = None

    @property
    def vocab_size(self) -> int:
        """The output vocabulary size (see `model_vocab_size`), computed once."""
        if self._vocab_size is None:
            self._vocab_size = model_vocab_size(self.model_ref, self.tokenizer)
        return self._vocab_size

    def readout_ids(self) -> list[int]:
        """The token ids of every readout answer (see `readout_token_ids`), computed once."""
        if self._answer_ids is None:
            self._answer_ids = readout_token_ids(self.tokenizer)
        return self._answer_ids
