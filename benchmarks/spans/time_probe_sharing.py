"""Time occlusion on a sequence probe head for a few misbehaving samples: the masked variants
read plainly (one capture pass each, every layer) vs with `SharedPrefixProbe` (each variant
from where it departs from the one before, up to the head's layer).

Same samples, same process, weights loaded before either path; prints a markdown table with
wall and CPU seconds (CPU seconds of this process: on a shared machine they, not wall seconds,
say what the work costs) and the largest difference between the two paths' head scores.

    python benchmarks/spans/time_probe_sharing.py --benchmark amb-open --n 2 --threads 1
"""

from __future__ import annotations

import time

from time_prefix_sharing import arguments, samples_and_backend

from calimon.prompts import load_prompt
from calimon.scoring.probes.monitor import ProbeMonitor
from calimon.studies.spans.occlusion import masked_sample, occlusion_units
from calimon.studies.spans.probe_sharing import SharedPrefixProbe


def timed(fn):
    """(result, wall seconds, CPU seconds of this process) of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = arguments(__doc__, 2)
    ap.add_argument("--head", default="amb-open-seq")
    a = ap.parse_args()
    bad, backend = samples_and_backend(a)
    probe = ProbeMonitor(backend, load_prompt("direct"), a.head)
    variants = [masked_sample(s, u) for s in bad
                for u in occlusion_units(s.response, task=s.task)]
    probe.score(bad[:1])  # loads the weights and the head

    _, w_one, c_one = timed(lambda: probe.score(bad))
    plain, w_plain, c_plain = timed(lambda: probe.score(variants))
    shared_probe = SharedPrefixProbe(probe)
    shared, w_shared, c_shared = timed(lambda: shared_probe.score(variants))
    tokens = sum(v.tokens - probe.encoder.prefix_len for v in plain)
    print(f"{len(bad)} misbehaving samples of {a.benchmark}/{a.split} (limit {a.limit}, seed "
          f"{a.seed}), {len(variants)} masked variants, head {a.head} (layer "
          f"{probe.head.layer} of {backend.num_layers}), threads {a.threads}\n")
    print("| path | wall seconds | CPU seconds | CPU seconds / sample | tokens after the template |")
    print("|---|---|---|---|---|")
    print(f"| one pass (originals) | {w_one:.1f} | {c_one:.1f} | {c_one / len(bad):.1f} | - |")
    print(f"| variants, plain | {w_plain:.1f} | {c_plain:.1f} | {c_plain / len(bad):.1f} | "
          f"{tokens} |")
    print(f"| variants, shared prefix to the head's layer | {w_shared:.1f} | {c_shared:.1f} | "
          f"{c_shared / len(bad):.1f} | {shared_probe.tokens_computed} |")
    diff = max(abs(p.p_raw - s.p_raw) for p, s in zip(plain, shared, strict=True))
    print(f"\nmax |score(plain) - score(shared)| over the variants: {diff:.2e}")


if __name__ == "__main__":
    main()
