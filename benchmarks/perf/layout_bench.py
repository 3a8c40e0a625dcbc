"""The mask-free scoring layout on CPU: the shared-prefix path against a plain forward loop at a
long prompt, and packed against padded batches on humaneval-pairs' real lengths.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/layout_bench.py --rounds 3

Model: the embedded SmolLM2-135M, fp32, one loaded copy shared by every case, a fixed number of
torch threads (--threads). Prompts: the ``direct`` template's verdict prompt.

- **prefix** (--length tokens, batch 1): the plain loop (``model(input_ids, logits_to_keep=1)``
  on the whole prompt, as benchmarks/gpu's plain rows) against calimon's
  ``next_token_logprobs`` with the shared prefix's KV cache reused, under each ``attention``
  option: ``mask`` (the explicit causal mask, the path before the layout), ``causal`` (the
  default: no mask, the query padded to the keys' length), ``lower_right`` (torch's
  causal_lower_right bias; a materialized mask on a CPU). One humaneval-pairs sample's response
  is stretched to the length (benchmarks/perf/perf_case.py's ``stretch``).
- **packing** (--samples real humaneval-pairs transcripts, batch --batch, calimon's own
  length-sorted batching): padded batches with the explicit mask (the path before), padded
  without a mask, packed (one sequence per batch), and batch 1 (the CPU default).

Cases run interleaved: each round runs every case once, after one untimed warm-up of each
(which also computes the prefix's KV cache); odd rounds run the cases in reverse order, so a
load that rises or falls during a round weighs on every case alike. Each case is timed by the
wall clock and by this process's CPU seconds (``time.process_time``: all its threads; other
jobs on a shared machine disturb it much less than the wall clock). The tables give the median
over rounds of each, and for each case the median over rounds of (reference / case) within the
round (>1: faster than the reference, the first row). Agreement: the largest difference of any
next-token probability from the reference case's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _backend(ctx, **kwargs):
    from calimon.scoring.backends.transformers_backend import TransformersBackend

    return TransformersBackend.from_loaded(ctx.ref, ctx.model, ctx.tokenizer, **kwargs)


def prefix_cases(ctx, length: int) -> tuple[list[tuple[str, object]], dict]:
    """(name, run) of the prefix section; each run returns (n, vocab) log-probs."""
    import torch
    from perf_case import stretch

    from calimon.prompts import encoder_for, load_prompt

    encoder = encoder_for(ctx.backend, load_prompt("direct"), "verdict", length + 256)
    sample = stretch(ctx.samples[:1], ctx.tokenizer, encoder, length)[0]
    enc = encoder.encode(sample.request, sample.response)
    assert enc.truncation is None, "the stretched prompt was cut"
    ids, prefix = enc.ids, encoder.prefix_len

    def plain():
        with torch.inference_mode():
            logits = ctx.model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits
            return torch.log_softmax(logits[:, -1].float(), -1).numpy()

    cases = [("plain loop: model(input_ids, logits_to_keep=1)", plain)]
    for attention in ("mask", "causal", "lower_right"):
        backend = _backend(ctx, attention=attention, max_batch_size=1)
        cases.append((f"calimon prefix KV, attention={attention}",
                      lambda b=backend: b.next_token_logprobs([ids], prefix)))
    return cases, {"tokens": len(ids), "prefix": prefix}


def packing_cases(ctx, n: int, batch: int) -> tuple[list[tuple[str, object]], dict]:
    """(name, run) of the packing section, and the lengths and padding share."""
    encoded = [ctx.encoder.encode(s.request, s.response).ids for s in ctx.samples[:n]]
    prefix = ctx.encoder.prefix_len
    variants = [("padded, explicit mask (before)", dict(attention="mask", max_batch_size=batch)),
                ("padded, no mask", dict(packing=False, max_batch_size=batch)),
                ("packed", dict(max_batch_size=batch)),
                ("batch 1 (the CPU default)", dict(max_batch_size=1))]
    cases = []
    for name, kwargs in variants:
        backend = _backend(ctx, batch_tokens=10**9, **kwargs)
        cases.append((name, lambda b=backend: b.next_token_logprobs(encoded, prefix)))
    probe = _backend(ctx, max_batch_size=batch, batch_tokens=10**9)
    groups = probe._batches(encoded)
    tails = [len(p) - prefix for p in encoded]
    padded = sum(len(g) * max(tails[i] for i in g) for g in groups)
    return cases, {"lengths": sorted(len(p) for p in encoded), "batches": len(groups),
                   "padding": 1 - sum(tails) / padded}


def run(cases, rounds: int) -> list[dict]:
    """Warm up each case, then ``rounds`` interleaved rounds (odd ones in reverse order); per
    case its wall and CPU seconds and its output."""
    import numpy as np

    out = [{"name": name, "wall": [], "cpu": [], "out": np.asarray(fn())} for name, fn in cases]
    for r in range(rounds):
        order = list(range(len(cases)))[::-1 if r % 2 else 1]
        for i in order:
            wall, cpu = time.perf_counter(), time.process_time()
            cases[i][1]()
            out[i]["cpu"].append(time.process_time() - cpu)
            out[i]["wall"].append(time.perf_counter() - wall)
        print(f"round {r + 1} (wall s): " + ", ".join(f"{t['wall'][-1]:.2f}" for t in out),
              file=sys.stderr, flush=True)
    return out


def _cell(res: dict, ref: dict, kind: str) -> str:
    """'median (per round)' seconds and the median within-round speed-up against ``ref``."""
    ratios = [a / b for a, b in zip(ref[kind], res[kind], strict=True)]
    times = ", ".join(f"{x:.1f}" for x in res[kind])
    rr = ", ".join(f"{x:.2f}" for x in ratios)
    return (f"{statistics.median(res[kind]):.2f} ({times}) | "
            f"**{statistics.median(ratios):.2f}x** ({rr})")


def table(results: list[dict], samples: int) -> str:
    """Markdown rows: wall and CPU seconds with the within-round speed-up against the first
    row, samples per wall second, and the largest probability difference from the first row."""
    import numpy as np

    ref = results[0]
    rows = ["| case | wall s, median (rounds) | speed-up vs row 1, wall (rounds) | CPU s, median "
            "(rounds) | speed-up vs row 1, CPU (rounds) | samples/s (wall) | max abs diff of p "
            "vs row 1 |", "|---|---|---|---|---|---|---|"]
    for res in results:
        diff = float(np.abs(np.exp(res["out"]) - np.exp(ref["out"])).max())
        rows.append(f"| {res['name']} | {_cell(res, ref, 'wall')} | {_cell(res, ref, 'cpu')} | "
                    f"{samples / statistics.median(res['wall']):.3f} | {diff:.1e} |")
    return "\n".join(rows)


def context(args):
    """The loaded model, tokenizer, encoder and samples shared by every case."""
    import torch

    from calimon.data.registry import load_benchmark
    from calimon.prompts import load_prompt
    from calimon.scoring.backends import backend_options, build_backend
    from calimon.scoring.engines import MonitorSpec
    from calimon.scoring.monitor import Monitor
    from calimon.selection import select_pairs

    torch.set_num_threads(args.threads)
    backend = build_backend(MonitorSpec(model=args.model, options=backend_options(
        "transformers", {"threads": args.threads})))
    mon = Monitor(backend, load_prompt("direct"), "verdict")
    samples = select_pairs(load_benchmark("humaneval-pairs"), args.samples, args.seed)
    return types.SimpleNamespace(backend=backend, ref=backend.model_ref, model=backend.model,
                                 tokenizer=backend.tokenizer, encoder=mon.encoder,
                                 samples=samples)


def main(argv=None) -> None:
    """Run the chosen sections and print their markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--length", type=int, default=4000, help="prefix section: prompt tokens")
    ap.add_argument("--samples", type=int, default=16, help="packing section: transcripts")
    ap.add_argument("--batch", type=int, default=8, help="packing section: batch size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["prefix", "packing"])
    args = ap.parse_args(argv)
    ctx = context(args)
    load = os.getloadavg()[0]
    print(f"1-minute load average at the start: {load:.1f}")
    if args.only in (None, "prefix"):
        cases, info = prefix_cases(ctx, args.length)
        print(f"\n### Prefix path at {info['tokens']} prompt tokens (prefix {info['prefix']}), "
              f"batch 1, {args.threads} threads, {args.rounds} interleaved rounds\n")
        print(table(run(cases, args.rounds), 1))
    if args.only in (None, "packing"):
        cases, info = packing_cases(ctx, args.samples, args.batch)
        print(f"\n### Packed against padded: {len(info['lengths'])} humaneval-pairs transcripts "
              f"(prompt tokens {info['lengths'][0]}-{info['lengths'][-1]}, mean "
              f"{statistics.mean(info['lengths']):.0f}), batch {args.batch} "
              f"({info['batches']} batches, calimon's sorted batching: "
              f"{100 * info['padding']:.0f}% of the padded positions are padding), "
              f"{args.threads} threads, {args.rounds} interleaved rounds\n")
        print(table(run(cases, args.rounds), len(info["lengths"])))
    print(f"\n1-minute load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
