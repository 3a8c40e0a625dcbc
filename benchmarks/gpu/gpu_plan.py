"""What run_gpu_perf.py measures: its cases, their prompt lengths and an estimate of its run time.

Sections (each at every --lengths value unless said otherwise):
- verdict readout: calimon's default batching and each --batch-sizes value, calimon and plain;
- probe stopped at its layer: the same batch sizes;
- padding (verdict readout): equal lengths against lengths spread over [L/2, 3L/2], at each
  --padding-batch-sizes value (lengths up to --padding-max-length);
- real lengths: humaneval-pairs' own prompt lengths (humaneval-pairs-lengths.json, drawn with
  the seed) and --real-scales times them, at --real-batch: calimon packed (its default: one
  sequence per batch, no padding), calimon padded (packing off) and plain (padded).

Long prompts get fewer samples (`samples_at`) so that the whole run stays within minutes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
LENGTHS_FILE = HERE / "humaneval-pairs-lengths.json"
# calimon's variants: backend options of each calimon path (plain runs transformers directly)
CALIMON_PATHS = {"calimon": {}, "calimon padded": {"packing": False},
                 "calimon mask": {"attention": "mask", "packing": False},
                 "calimon lower_right": {"attention": "lower_right"},
                 # the levers suite (gpu_levers.py): each lever on and off, not the defaults
                 "calimon eager": {"kernels": "none", "varlen": False},
                 "calimon varlen": {"kernels": "none", "varlen": True},
                 "calimon liger": {"kernels": "liger", "varlen": True},
                 "calimon compile": {"kernels": "compile", "varlen": True}}
# the plain loop with calimon's fused kernels (calimon.scoring.backends.fused), and compiled whole
PLAIN_KERNELS = {"plain": "none", "plain liger": "liger", "plain compile": "compile"}
GRAPH_PATH = "plain graph"


@dataclass(frozen=True)
class Case:
    """One measured configuration: which path (`CALIMON_PATHS` or ``plain``), on which prompts,
    in batches of `batch`."""

    section: str
    path: str
    kind: str  # verdict | probe
    lengths: tuple[int, ...]
    batch: int | None  # None: calimon's default batching
    label: str
    opts: tuple = ()  # more calimon backend options, as (name, value) pairs

    @property
    def calimon(self) -> bool:
        """Whether calimon's backend runs this case."""
        return self.path in CALIMON_PATHS

    @property
    def packed(self) -> bool:
        """Whether calimon packs this case's batches (no padding computed)."""
        return self.calimon and CALIMON_PATHS[self.path].get("packing", True)

    def flops(self, shape, prefix: int, layer: int) -> float:
        """Useful FLOPs of one run; calimon computes the shared prefix once, before timing."""
        start = prefix if self.calimon else 0
        depth = layer if self.kind == "probe" else None
        out = sum(shape.tokens(start, n, depth) for n in self.lengths)
        if self.kind == "verdict" or self.calimon:  # capture still reads the answer
            out += shape.logits(len(self.lengths))
        return out

    def computed_flops(self, shape, prefix: int, layer: int, default_batch: int) -> float:
        """FLOPs the device runs, padding included (for the run-time estimate)."""
        if self.packed or len(set(self.lengths)) == 1:
            return self.flops(shape, prefix, layer)
        padded = []
        for group in sorted_batches(self.lengths, self.batch or default_batch):
            padded += [max(self.lengths[i] for i in group)] * len(group)
        return Case(self.section, self.path, self.kind, tuple(padded), self.batch,
                    self.label, self.opts).flops(shape, prefix, layer)


def sorted_batches(lengths, batch: int) -> list[list[int]]:
    """Indices grouped as calimon groups them: longest first, `batch` at a time."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i:i + batch] for i in range(0, len(order), batch)]


def padding_share(lengths, batch: int) -> float:
    """Share of padding among the positions computed when `lengths` run in sorted batches."""
    padded = sum(len(b) * max(lengths[i] for i in b) for b in sorted_batches(lengths, batch))
    return 1.0 - sum(lengths) / padded if padded else 0.0


def mixed_lengths(mean: int, n: int, seed: int) -> tuple[int, ...]:
    """`n` lengths evenly spread over [mean/2, 3*mean/2], shuffled (mean ~ `mean`)."""
    lo, hi = mean // 2, (3 * mean) // 2
    out = [round(lo + (hi - lo) * i / max(1, n - 1)) for i in range(n)]
    random.Random(seed).shuffle(out)
    return tuple(out)


def real_lengths(n: int, scale: float, seed: int, prefix: int) -> tuple[int, ...]:
    """`n` humaneval-pairs prompt lengths (drawn with `seed`), times `scale`, each at least
    the shared prefix plus 2 tokens."""
    pool = json.loads(LENGTHS_FILE.read_text(encoding="utf-8"))["lengths"]
    drawn = random.Random(seed).sample(pool, n) if n <= len(pool) else \
        [random.Random(seed + i).choice(pool) for i in range(n)]
    return tuple(max(prefix + 2, round(x * scale)) for x in drawn)


def samples_at(args, length: int) -> int:
    """Prompts per case at ``length``: --samples up to 4,000 tokens, fewer beyond (the same
    tokens per case), at least 8."""
    return args.samples if length <= 4000 else max(min(8, args.samples),
                                                   args.samples * 4000 // length)


def plan(args, shape) -> list[Case]:
    """Every case of a run, in the order they run and are printed."""
    cases = []
    for L in args.lengths:
        n = samples_at(args, L)
        eq = (L,) * n
        cases.append(Case("verdict readout", "calimon", "verdict", eq, None, "calimon default"))
        for b in _batches(args.batch_sizes, n):
            cases += [Case("verdict readout", p, "verdict", eq, b, "equal") for p in
                      ("calimon", "plain")]
    for L in args.lengths:
        n = samples_at(args, L)
        for b in _batches(args.batch_sizes, n):
            cases += [Case(f"probe stopped at layer {args.probe_layer} of {shape.layers}", p,
                           "probe", (L,) * n, b, "equal") for p in ("calimon", "plain")]
    for L in [x for x in args.lengths if x <= args.padding_max_length]:
        n = samples_at(args, L)
        mixed = mixed_lengths(L, n, args.seed)
        for b in _batches(args.padding_batch_sizes, n):
            for p in ("calimon", "plain"):
                cases += [Case("padding (verdict readout)", p, "verdict", (L,) * n, b, "equal"),
                          Case("padding (verdict readout)", p, "verdict", mixed, b, "mixed")]
    for scale, n in zip(args.real_scales, args.real_samples, strict=True):
        lengths = real_lengths(n, scale * args.real_unit, args.seed, args.prefix_tokens)
        for p in ("calimon", "calimon padded", "plain"):
            cases.append(Case("real lengths (humaneval-pairs, verdict readout)", p, "verdict",
                              lengths, args.real_batch, f"humaneval-pairs x{scale:g}"))
    return cases


def _batches(sizes, n: int) -> list[int]:
    """The batch sizes worth running for ``n`` prompts (a size above n runs as n: once)."""
    out = sorted({min(b, n) for b in sizes})
    return out


def estimate_seconds(cases, args, shape, tflops: float, default_batch: int = 32) -> float:
    """Seconds of forward passes the plan needs at ``tflops`` TFLOP/s of computed work (warm-up
    and timed runs; model build and Python overhead not counted)."""
    runs = args.warmup + args.repeats
    work = sum(c.computed_flops(shape, args.prefix_tokens, args.probe_layer, default_batch)
               for c in cases)
    return runs * work / (tflops * 1e12)


def longest(cases: list[Case]) -> int:
    """The longest prompt of any case."""
    return max(max(c.lengths) for c in cases)


def plan_text(args, shape, cases: list[Case]) -> str:
    """One line per case (section, path, samples, batch, lengths, computed PFLOP per run) and
    the estimated seconds of forward passes at --assume-tflops."""
    lines = []
    for c in cases:
        pf = c.computed_flops(shape, args.prefix_tokens, args.probe_layer, 32) / 1e15
        lines.append(f"{c.section} | {c.path} | {c.label} | {len(c.lengths)} x "
                     f"{min(c.lengths)}-{max(c.lengths)} tokens | batch {c.batch or 'default'} "
                     f"| {pf:.3g} PFLOP per run")
    est = estimate_seconds(cases, args, shape, args.assume_tflops)
    lines.append(f"{len(cases)} cases, {args.warmup} warm-up + {args.repeats} timed runs each: "
                 f"about {est:.0f} s of forward passes at {args.assume_tflops:g} TFLOP/s "
                 "(model build and Python overhead not counted)")
    return "\n".join(lines)
