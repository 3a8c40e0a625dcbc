"""Constrained generation for the in-process transformers backend: a thin adapter around
outlines-core (the engine of vLLM's ``outlines`` structured-outputs backend). No grammar code
lives here: outlines-core compiles the regex into an index over the tokenizer's vocabulary, and
one `outlines_core.Guide` per sequence says which tokens may come next; `GuideMask` sets every
other logit to -inf before the greedy pick.

The vocabulary is handed to outlines-core as the bytes each token stands for, the way vLLM's
outlines backend builds it: byte-level BPE pieces mapped back through the GPT-2 byte table,
``<0xNN>`` byte tokens as that byte, SentencePiece's ``▁`` as a space; special tokens are left
out (the tokenizer's eos is the vocabulary's end token, allowed only where the regex may end).
"""

from __future__ import annotations

import re
import weakref

from calimon.errors import BackendError

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_vocabularies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_indexes: dict = {}


def token_bytes(tokenizer) -> dict[bytes, list[int]]:
    """Every non-special token id of ``tokenizer`` by the bytes it decodes to."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    to_byte = {v: k for k, v in bytes_to_unicode().items()}
    special = set(tokenizer.all_special_ids)
    out: dict[bytes, list[int]] = {}
    for piece, tid in tokenizer.get_vocab().items():
        if tid in special:
            continue
        text = tokenizer.convert_tokens_to_string([piece])
        if piece.startswith("\u2581") or piece == "<0x20>":  # SentencePiece drops the space
            text = " " + text
        m = _BYTE_TOKEN.match(piece)
        if m:
            raw = bytes([int(m.group(1), 16)])
        elif "\ufffd" in text and "\ufffd" not in piece and all(c in to_byte for c in piece):
            raw = bytes(to_byte[c] for c in piece)  # a byte-level piece of a UTF-8 character
        else:
            raw = text.encode("utf-8")
        if raw:
            out.setdefault(raw, []).append(int(tid))
    return out


def vocabulary(tokenizer):
    """The outlines-core `Vocabulary` of ``tokenizer`` (built once per tokenizer object)."""
    import outlines_core

    try:
        return _vocabularies[tokenizer]
    except (KeyError, TypeError):
        pass
    if tokenizer.eos_token_id is None:
        raise BackendError("constrained decoding needs a tokenizer with an eos token")
    vocab = outlines_core.Vocabulary(int(tokenizer.eos_token_id), token_bytes(tokenizer))
    try:
        _vocabularies[tokenizer] = vocab
    except TypeError:  # a tokenizer that takes no weak reference is not cached
        pass
    return vocab


def regex_index(tokenizer, regex: str):
    """The outlines-core `Index` of ``regex`` over ``tokenizer``'s vocabulary (the last few
    are kept: a run builds one per prompt)."""
    import outlines_core

    vocab = vocabulary(tokenizer)
    key = (regex, id(vocab))
    if key not in _indexes:
        try:
            index = outlines_core.Index(regex, vocab)
        except ValueError as exc:  # outlines-core refuses a regex it cannot index
            raise BackendError(f"cannot build a token index for the constraint ({exc})"
                               ) from None
        if len(_indexes) >= 8:
            _indexes.pop(next(iter(_indexes)))
        _indexes[key] = (vocab, index)  # the vocabulary is held, so its id stays its own
    return _indexes[key][1]


class GuideMask:
    """A transformers logits processor for one batch of ``rows`` prompts left-padded to
    ``width`` tokens: each row follows its own `outlines_core.Guide`; tokens the guide does not
    allow get -inf. A row that emitted a stop token is left alone (generate pads it)."""

    def __init__(self, index, rows: int, width: int, stops):
        import outlines_core

        self.guides = [outlines_core.Guide(index) for _ in range(rows)]
        self.width = width
        self.stops = set(stops)
        self.done = [False] * rows

    def __call__(self, input_ids, scores):
        import torch

        if input_ids.shape[1] > self.width:  # advance each guide by the token just chosen
            for row, tok in enumerate(input_ids[:, -1].tolist()):
                if self.done[row]:
                    continue
                if tok in self.stops:
                    self.done[row] = True
                else:
                    self.guides[row].advance(tok, return_tokens=False)
        mask = torch.full_like(scores, float("-inf"))
        for row, guide in enumerate(self.guides):
            if self.done[row]:
                mask[row] = 0.0
                continue
            allowed = torch.tensor(guide.get_tokens(), dtype=torch.long, device=scores.device)
            mask[row, allowed[allowed < scores.shape[1]]] = 0.0
        return scores + mask


__all__ = ["GuideMask", "regex_index", "token_bytes", "vocabulary"]
