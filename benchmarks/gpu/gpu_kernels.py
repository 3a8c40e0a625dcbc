"""Which kernels a case's pass launches (run_gpu_perf.py ``--kernel-profile``): one run of each
path at the longest length of the levers section under torch.profiler, its attention kernels
(flash, memory-efficient, cuDNN or math) and its costliest kernels, with their device time."""

from __future__ import annotations

import sys

# words in a kernel's name that mark it as attention (flash, memory-efficient, cuDNN, math)
ATTENTION_WORDS = ("flash", "fmha", "attention", "attn", "cudnn", "efficient", "softmax")
TOP = 8  # costliest kernels listed per path


def profile_paragraph(bench, cases) -> str:
    """One line per path: its pass's total kernel time, the attention kernels and the top
    kernels (CUDA kernels on a GPU; CPU operators elsewhere, for the CPU dry run)."""
    levers = [c for c in cases if c.section.startswith("levers (")]
    if not levers:
        return "Kernel profile: no case of the levers section ran."
    longest = max(max(c.lengths) for c in levers)
    firsts = {c.path: c for c in levers if max(c.lengths) == longest}
    lines = []
    for path, case in firsts.items():
        try:
            lines.append(f"{path}: {_profile(bench, case)}")
        except Exception as exc:  # noqa: BLE001 - a path that fails here is a line, not a stop
            lines.append(f"{path}: not profiled ({type(exc).__name__}: {exc})"[:200])
    where = "CUDA kernels" if bench.cuda else "CPU operators (no GPU here)"
    text = (f"Kernel profile ({where}; one run of each path at {longest} tokens after one "
            "untimed run; ms of device time, calls): " + "; ".join(lines) + ".")
    print(text, file=sys.stderr, flush=True)
    return text


def _profile(bench, case) -> str:
    from torch.profiler import ProfilerActivity, profile

    torch = bench.torch
    run = (bench._calimon_runner if case.calimon else bench._plain_runner)(case)
    run()
    sync = torch.cuda.synchronize if bench.cuda else (lambda: None)
    sync()
    activity = ProfilerActivity.CUDA if bench.cuda else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        run()
        sync()
    rows = [(e.key, _self_us(e, bench.cuda), e.count) for e in prof.key_averages()]
    rows = sorted((r for r in rows if r[1] > 0), key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    attn = [r for r in rows if any(w in r[0].lower() for w in ATTENTION_WORDS)]
    return (f"total {total / 1e3:.1f} ms; attention {_cells(attn)}; top {_cells(rows[:TOP])}")


def _self_us(event, cuda: bool) -> float:
    names = ("self_device_time_total", "self_cuda_time_total") if cuda else \
        ("self_cpu_time_total",)
    return next((float(getattr(event, n)) for n in names if hasattr(event, n)), 0.0)


def _cells(rows) -> str:
    if not rows:
        return "none"
    return ", ".join(f"`{name[:80]}` ({us / 1e3:.1f} ms, {n})" for name, us, n in rows)
