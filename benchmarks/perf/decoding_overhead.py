"""The cost of constrained decoding: the binary readout on the same samples, free and json
(the prompt's JSON schema enforced through outlines-core), on the transformers backend.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/decoding_overhead.py --limit 8

Prints a markdown table (benchmarks/results/perf.md, section "Constrained decoding"): samples/s
(wall, model loaded and index built before timing), generated tokens, parse failures, and for
the direct prompt how many json decisions equal the json readout's p_raw >= 0.5. Each case
scores the samples once, in the order free, json (no store: every reading is computed).
"""

from __future__ import annotations

import argparse
import time


def _case(backend, prompt, decoding, samples):
    from calimon.scoring.monitor import Monitor

    mon = Monitor(backend, prompt, "binary", decoding=decoding)
    if mon.constraint is not None:  # the index is built once per run: not in the timing
        from calimon.scoring.backends.constrained import regex_index

        regex_index(backend.tokenizer, mon.constraint.regex)
    start = time.perf_counter()
    verdicts = mon.score(samples)
    seconds = time.perf_counter() - start
    tok = backend.tokenizer
    prefix = mon.constraint.prefix if mon.constraint is not None else ""
    generated = sum(len(tok(v.text[len(prefix):], add_special_tokens=False)["input_ids"])
                    for v in verdicts if v.text)
    return verdicts, seconds, generated


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--benchmark", default="humaneval-pairs")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from calimon.data.registry import load_benchmark
    from calimon.prompts import load_prompt
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec
    from calimon.scoring.monitor import Monitor
    from calimon.selection import select_pairs

    backend = build_backend(MonitorSpec(model=args.model, options={"device": "cpu"}))
    samples = select_pairs(load_benchmark(args.benchmark), args.limit, args.seed)
    _ = backend.model  # load before timing
    print(f"{args.model}, {len(samples)} samples of {args.benchmark} (select_pairs seed "
          f"{args.seed}), transformers backend on CPU\n")
    print("| prompt | decoding | samples/s (wall) | seconds | generated tokens "
          "| parse failures | decisions = json p_raw >= 0.5 |")
    print("|---|---|---|---|---|---|---|")
    for name in ("direct", "evidence"):
        prompt = load_prompt(name)
        readout = Monitor(backend, prompt, "json").score(samples) if name == "direct" else None
        for decoding in ("free", "json"):
            verdicts, seconds, generated = _case(backend, prompt, decoding, samples)
            failures = sum(v.status == "parse_failure" for v in verdicts)
            agree = "-"
            if readout is not None and decoding == "json":
                same = sum(v.decision == (r.p_raw >= 0.5)
                           for v, r in zip(verdicts, readout, strict=True))
                agree = f"{same} of {len(samples)}"
            print(f"| {name} | {decoding} | {len(samples) / seconds:.3f} | {seconds:.1f} | "
                  f"{generated} | {failures} of {len(samples)} | {agree} |")


if __name__ == "__main__":
    main()
