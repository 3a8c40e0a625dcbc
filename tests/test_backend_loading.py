"""The loading helpers the three backends share (no model needed)."""

from __future__ import annotations

import json

from calimon.models import ModelConfig, ModelSource, ResolvedModel
from calimon.scoring.backends.http_backend import HTTPBackend
from calimon.scoring.backends.loading import (
    LazyTokenizer,
    TokenIdVocab,
    model_vocab_size,
    stop_token_ids,
)
from calimon.scoring.backends.transformers_backend import TransformersBackend
from calimon.scoring.backends.vllm_backend import VLLMBackend


class Tok:
    eos_token_id = 0

    def __init__(self, pieces=("<eos>", "<|im_end|>", "a", "b")):
        self.pieces = list(pieces)

    def __len__(self):
        return len(self.pieces)

    def convert_tokens_to_ids(self, piece):
        return self.pieces.index(piece) if piece in self.pieces else None


def model(tmp_path, vocab=None):
    if vocab is not None:
        (tmp_path / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    cfg = ModelConfig(version=1, name="tiny", source=ModelSource(kind="local"))
    return ResolvedModel("tiny", tmp_path, "rev0", cfg)


def test_stop_ids_are_eos_and_im_end_where_they_exist():
    assert stop_token_ids(Tok()) == {0, 1}
    assert stop_token_ids(Tok(("<eos>", "a"))) == {0}
    none = Tok(("a",))
    none.eos_token_id = None
    assert stop_token_ids(none) == set()


def test_vocab_size_is_the_larger_of_config_and_tokenizer(tmp_path):
    assert model_vocab_size(model(tmp_path), Tok()) == 4  # no config.json
    assert model_vocab_size(model(tmp_path, 48), Tok()) == 48
    assert model_vocab_size(model(tmp_path, 2), Tok()) == 4


def test_backends_share_the_mixins_and_keep_a_passed_tokenizer(tmp_path):
    assert issubclass(TransformersBackend, LazyTokenizer)
    assert issubclass(HTTPBackend, TokenIdVocab) and issubclass(VLLMBackend, TokenIdVocab)
    tok = Tok()
    be = HTTPBackend(model(tmp_path, 10), tokenizer=tok)
    assert be.tokenizer is tok and be.vocab_size == 10
