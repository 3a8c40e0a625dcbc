"""Time the masked variants of a few misbehaving samples: plain vs per-sample prefix sharing.

Same samples, same process, template-prefix cache warm for both; prints a markdown table with
seconds and tokens as multiples of one scoring pass over the originals, and the largest
difference between the two paths' answer log-probabilities.

    python benchmarks/spans/time_prefix_sharing.py --benchmark amb-open --n 6 --threads 1
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from calimon.data.registry import load_benchmark
from calimon.prompts import encoder_for, load_prompt
from calimon.scoring.backends import build_backend
from calimon.scoring.engines import MonitorSpec
from calimon.selection import select_pairs
from calimon.studies.spans.occlusion import PrefixSharingBackend, masked_sample, occlusion_units


def arguments(doc: str, n: int) -> argparse.ArgumentParser:
    """The options of a timing script (``n``: the default number of samples timed)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--benchmark", default="amb-open")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=48, help="study selection (whole pairs)")
    ap.add_argument("--n", type=int, default=n, help="misbehaving samples timed")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def samples_and_backend(a):
    """The first ``a.n`` misbehaving samples of the study selection, and the CPU backend."""
    samples = [s for s in load_benchmark(a.benchmark) if s.label is not None
               and s.split == a.split]
    bad = [s for s in select_pairs(samples, a.limit, a.seed) if s.label][:a.n]
    opts = {"device": "cpu", **({"threads": a.threads} if a.threads else {})}
    return bad, build_backend(MonitorSpec(model=a.model, options=opts))


def main() -> None:
    a = arguments(__doc__, 6).parse_args()
    bad, backend = samples_and_backend(a)
    enc = encoder_for(backend, load_prompt("direct"), "verdict",
                      backend.model_ref.config.max_input_tokens)
    prefix = enc.prefix_len
    originals = [enc.encode(s.request, s.response).ids for s in bad]
    variants = [[enc.encode(v.request, v.response).ids
                 for v in (masked_sample(s, u) for u in occlusion_units(s.response, task=s.task))]
                for s in bad]
    backend.next_token_logprobs([originals[0]], prefix)  # load, warm the template cache

    t = time.perf_counter()
    backend.next_token_logprobs(originals, prefix)
    t_one = time.perf_counter() - t
    flat = [p for group in variants for p in group]
    t = time.perf_counter()
    plain = backend.next_token_logprobs(flat, prefix)
    t_plain = time.perf_counter() - t
    shared_backend = PrefixSharingBackend(backend)
    shared_backend._prefix_layers(tuple(originals[0][:prefix]))  # warm, like the plain path
    t = time.perf_counter()
    shared = np.concatenate([shared_backend.next_token_logprobs(g, prefix) for g in variants])
    t_shared = time.perf_counter() - t

    tokens_one = sum(len(p) - prefix for p in originals)
    print(f"{len(bad)} misbehaving samples of {a.benchmark}/{a.split} (limit {a.limit}, seed "
          f"{a.seed}), {len(flat)} masked variants, threads {a.threads}\n")
    print("| path | seconds | x one pass (s) | tokens | x one pass (tokens) |")
    print("|---|---|---|---|---|")
    print(f"| one scoring pass (originals) | {t_one:.1f} | 1.00 | {tokens_one} | 1.00 |")
    print(f"| variants, plain | {t_plain:.1f} | {t_plain / t_one:.2f} | "
          f"{shared_backend.tokens_plain} | {shared_backend.tokens_plain / tokens_one:.2f} |")
    print(f"| variants, prefix sharing | {t_shared:.1f} | {t_shared / t_one:.2f} | "
          f"{shared_backend.tokens_computed} | "
          f"{shared_backend.tokens_computed / tokens_one:.2f} |")
    pos = np.isfinite(plain) & np.isfinite(shared)
    print(f"\nmax |log p(plain) - log p(shared)| over the vocabulary: "
          f"{np.abs(plain[pos] - shared[pos]).max():.2e}")


if __name__ == "__main__":
    main()
