"""Stage 1 of the shift study: one capture pass per sample of the study's subsample of amb-open
(pooled hidden states of every layer and the verdict P(Yes) of the same pass), cached under
~/.cache/calimon/features. A re-run makes no model calls.

    python benchmarks/shift/extract.py            # the documented sizes (see run_shift.py)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from calimon.data.registry import load_benchmark
from calimon.defaults import DEFAULT_MODEL
from calimon.scoring.probes.features import extract_features
from calimon.selection import select_pairs

SOURCES = ("hh-rlhf", "xstest", "cyberseceval", "sven", "truthfulqa", "humaneval", "mbpp",
           "gsm8k")
PER_SOURCE = 80  # samples per source, whole pairs, from all of its splits
MAX_INPUT_TOKENS = 384
BENCHMARK = "amb-open"  # version 2; the study before the verdict read amb-open@1


def study_samples(benchmark: str = BENCHMARK, per_source: int = PER_SOURCE, seed: int = 0):
    """The study's subsample: per source at most ``per_source`` labelled samples made of whole
    pairs (``select_pairs``, seeded, round-robin over cells), from all of its splits."""
    samples = [s for s in load_benchmark(benchmark) if s.label is not None]
    out = []
    for src in SOURCES:
        out.extend(select_pairs([s for s in samples if s.source == src], per_source, seed))
    return out


def load_backend(model: str = DEFAULT_MODEL):
    """The model's transformers backend on CPU, built by the one factory."""
    from calimon.scoring.engines import BackendSettings

    return BackendSettings(device="cpu").monitor_spec(model, "direct", "verdict").build_backend()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--prompt", default="direct")
    ap.add_argument("--max-input-tokens", type=int, default=MAX_INPUT_TOKENS)
    ap.add_argument("--per-source", type=int, default=PER_SOURCE)
    ap.add_argument("--benchmark", default=BENCHMARK)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/shift/out/extract.json"),
                    help="where to record how many samples this run captured and its time")
    args = ap.parse_args(argv)
    from calimon.prompts import load_prompt

    samples = study_samples(args.benchmark, per_source=args.per_source)
    backend = load_backend(args.model)
    t0 = time.perf_counter()
    done = [0]

    def tick(n):
        done[0] += n
        print(f"[{time.strftime('%H:%M:%S')}] features {done[0]} new ({len(samples)} in the "
              f"subsample)", file=sys.stderr, flush=True)

    extract_features(backend, load_prompt(args.prompt), samples,
                     max_input_tokens=args.max_input_tokens, chunk_size=16, progress=tick)
    seconds = time.perf_counter() - t0
    print(f"extracted {len(samples)} samples in {seconds:.0f} s", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"n_samples": len(samples), "n_captured_this_run": done[0],
                                    "seconds_this_run": round(seconds, 1),
                                    "max_input_tokens": args.max_input_tokens,
                                    "per_source": args.per_source,
                                    "benchmark": args.benchmark}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
