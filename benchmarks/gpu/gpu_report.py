"""The report side of run_gpu_perf.py: the GPUs' dense bf16 peaks (MFU's denominator), the
table's columns, and the markdown page around the measured rows."""

from __future__ import annotations

import platform
import re
import shlex
from datetime import UTC, datetime
from typing import Any, Protocol


class Bench(Protocol):
    """What the report reads of run_gpu_perf.Bench (declared here, not imported from there, so
    that the measuring side imports the report side and never the other way round)."""

    torch: Any
    args: Any
    model: Any
    shape: Any
    cuda: bool
    calimon: Any
    calimon_error: str | None
    weights_bytes: int | None
    nonfinite: set[str]

# Dense (no 2:4 sparsity) bf16 tensor-core peaks in TFLOP/s, matched on
# torch.cuda.get_device_name(). NVIDIA's datasheets print the with-sparsity figure (marked *);
# the dense peak is half of it. A device matching none of these (an H100 NVL, H200 NVL, L40,
# GH200, ...) gets MFU n/a: no peak is guessed. The figures are those the named datasheets
# publish, checked here against copies of them, not NVIDIA's pages (H100, L40S: reseller copies
# of the datasheet; A100: a page quoting it; L4, H200: third-party summaries).
PEAKS = (
    (r"\bH200(?! NVL)\b", "H200 (SXM)", 989.5, "NVIDIA H200 datasheet / nvidia.com/en-us/data-"
     "center/h200/: BF16 Tensor Core 1,979 TFLOPS*"),
    (r"\bH100 PCIe\b", "H100 PCIe", 756.5, "NVIDIA H100 datasheet / nvidia.com/en-us/data-center/"
     "h100/: BF16 Tensor Core 1,513 TFLOPS*"),
    (r"\bH100 (SXM|80GB HBM3)\b", "H100 SXM", 989.5, "NVIDIA H100 datasheet / nvidia.com/en-us/"
     "data-center/h100/: BF16 Tensor Core 1,979 TFLOPS*"),
    (r"\bA100\b", "A100", 312.0, "NVIDIA A100 datasheet / nvidia.com/en-us/data-center/a100/: "
     "BF16 Tensor Core 312 TFLOPS (624*), SXM and PCIe, 40 and 80 GB"),
    (r"\bL40S\b", "L40S", 362.05, "NVIDIA L40S datasheet / nvidia.com/en-us/data-center/l40s/: "
     "BF16 Tensor Core 362.05 TFLOPS (733*)"),
    (r"\bL4\b", "L4", 121.0, "NVIDIA L4 datasheet / nvidia.com/en-us/data-center/l4/: BF16 Tensor "
     "Core 242 TFLOPS*"),
)

COLUMNS = ("path", "prompt tokens", "batch", "samples", "padding", "s per run (median, min-max)",
           "samples/s", "prompt tokens/s", "TFLOP/s", "MFU", "peak GiB")


def device_peak(name: str) -> tuple[str, float, str] | None:
    """(label, dense bf16 TFLOP/s, source) of the first PEAKS entry matching a CUDA device name."""
    for pattern, label, tflops, source in PEAKS:
        if re.search(pattern, name):
            return label, tflops, source
    return None


def versions(bench: Bench) -> str:
    """torch / CUDA / transformers / calimon / Python versions, one line."""
    import transformers

    torch = bench.torch
    cal = bench.calimon.version if bench.calimon else f"not importable ({bench.calimon_error})"
    return (f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}), transformers "
            f"{transformers.__version__}, calimon {cal}, Python {platform.python_version()}")


def device_line(bench: Bench, peak) -> tuple[str, float | None]:
    """(the device and peak sentence, peak TFLOP/s or None)."""
    args, torch = bench.args, bench.torch
    name = torch.cuda.get_device_name() if bench.cuda else f"CPU ({platform.processor() or 'cpu'})"
    if args.peak_tflops:
        return f"{name}; peak {args.peak_tflops} TFLOP/s as given by --peak-tflops", args.peak_tflops
    if peak:
        label, tflops, source = peak
        return (f"{name}; dense bf16 peak of the {label}: {tflops} TFLOP/s ({source}; * = with "
                f"2:4 sparsity, twice the dense figure)"), tflops
    return f"{name}; no known dense bf16 peak for this device: MFU n/a (--peak-tflops sets one)", None


def model_line(bench: Bench, meta: dict) -> str:
    """The model sentence, with its parameter count checked against the config's own counts
    and, for Qwen3-4B, the model card's."""
    seen = {id(p): p.numel() for p in bench.model.parameters()}
    actual = sum(seen.values())
    total, body = bench.shape.parameters()
    line = (f"{actual / 1e9:.3g} B parameters "
            f"({body / 1e9:.3g} B non-embedding); counted from the config: {total / 1e9:.3g} B "
            f"({'equal' if actual == total else 'DIFFERENT'})")
    if "card_parameters_b" in meta:
        ok = (round(total / 1e9, 1) == meta["card_parameters_b"]
              and round(body / 1e9, 1) == meta["card_non_embedding_parameters_b"])
        line += (f"; model card: {meta['card_parameters_b']} B, "
                 f"{meta['card_non_embedding_parameters_b']} B non-embedding "
                 f"({'matches' if ok else 'DOES NOT MATCH'})")
    return line


def render(bench: Bench, meta: dict, sections: dict, argv: list[str], peak_text: str,
           notes: list[str] = ()) -> str:
    """The whole markdown report (``notes``: paragraphs before the tables)."""
    args = bench.args
    mem = "" if bench.weights_bytes is None else f"; weights {bench.weights_bytes / 2**30:.2f} GiB"
    bad = sorted(bench.nonfinite)
    lines = [
        f"# Prefill throughput: calimon's verdict readout and probe path, random-weight "
        f"{args.config} ({args.dtype})", "",
        "Regenerate (the device decides the figures; benchmarks/gpu/README.md):", "",
        "    " + shlex.join(["python", "benchmarks/gpu/run_gpu_perf.py", *argv]), "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {peak_text}. {versions(bench)}.", "",
        f"Model: Qwen3 architecture, config `{meta['source_name']}`, random weights (seed "
        f"{args.seed}), {args.dtype}, attention `{args.attn}`: {model_line(bench, meta)}{mem}.", "",
        f"Prompts: random token ids; every prompt starts with the same {args.prefix_tokens}-token "
        f"prefix (the template prefix calimon shares across prompts), which the calimon path "
        f"computes once, before timing, and reuses from its KV cache; the plain path recomputes "
        f"it. Probe: the decoder cut after block {args.probe_layer} of {bench.shape.layers}, mean "
        f"over the second half of each prompt's non-prefix tokens. Mixed lengths: spread evenly "
        f"over [L/2, 3L/2], sorted by length into batches as calimon sorts them. Real lengths: "
        f"humaneval-pairs' own prompt lengths (benchmarks/gpu/humaneval-pairs-lengths.json, "
        f"drawn with the seed) times {', '.join(f'{x:g}' for x in args.real_scales)}. Paths: "
        f"calimon (its defaults: no explicit attention mask, a batch of different lengths "
        f"packed into one sequence), calimon padded (packing off), plain (transformers "
        f"directly, right-padded with a mask where lengths differ).", "",
        f"Each case: {args.warmup} untimed warm-up run(s), then {args.repeats} timed runs over "
        f"all its samples (torch.cuda.synchronize before and after each); the table gives the "
        f"median. Prompt tokens/s counts every prompt token, the shared prefix included. TFLOP/s "
        f"counts useful FLOPs only (weight matmuls, causal attention over the real context, "
        f"the output layer where logits are read; no padding; a reused prefix not at all); MFU "
        f"is TFLOP/s over the peak above. Padding: the share of computed positions that are "
        f"padding. Peak GiB: torch.cuda.max_memory_allocated over the case, weights included.", "",
        "Outputs checked finite in the warm-up runs: " +
        ("all, in every case that ran" if not bad else "NOT FINITE in " + "; ".join(bad)) + ".",
        ""]
    for note in notes:
        lines += [note, ""]
    for title, rows in sections.items():
        lines += [f"## {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    return "\n".join(lines)
