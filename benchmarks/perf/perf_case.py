"""One measurement of the throughput benchmark, in a fresh process (so peak RSS is its own).

    python benchmarks/perf/perf_case.py '{"kind": "monitor", "readout": "verdict", ...}'

Prints one JSON line. `run_perf.py` runs every case and writes the results table.
Kinds: matmul (fp32 peak), monitor (a readout on a backend), probe (capture pass + a head),
store (second run over a scored set), profile (torch profiler of the verdict readout),
forward (a plain batch-1 forward loop over one prompt, eager or torch.compile'd: the ceiling).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from flops import (  # noqa: E402
    Shape,
    generation_flops,
    prefill_readout_flops,
    probe_flops,
)


class RssSampler:
    """Peak resident memory of this process and its children (vLLM's engine processes),
    sampled every 50 ms; ru_maxrss covers what sampling misses for this process."""

    def __init__(self):
        import psutil

        self.proc = psutil.Process()
        self.peak_tree = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                procs = [self.proc] + self.proc.children(recursive=True)
                total = sum(p.memory_info().rss for p in procs if p.is_running())
                self.peak_tree = max(self.peak_tree, total)
            except Exception:  # a child exiting between listing and reading
                pass
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def result(self) -> dict:
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"peak_rss_mb": round(own, 1),
                "peak_rss_tree_mb": round(max(own, self.peak_tree / 2**20), 1)}


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and its live children (vLLM's engine)."""
    import psutil

    me = psutil.Process()
    total = time.process_time()
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class Clock:
    """Wall, process CPU and process-tree CPU seconds of a block."""

    def __enter__(self):
        self.w0, self.c0, self.t0 = time.perf_counter(), time.process_time(), tree_cpu_seconds()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0
        self.tree_cpu = tree_cpu_seconds() - self.t0


def matmul_case(case: dict) -> dict:
    import torch

    if case.get("threads"):
        torch.set_num_threads(case["threads"])
    shapes = case.get("shapes") or [[4096, 576, 1536], [4096, 1536, 576], [2048, 2048, 2048]]
    out = []
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            torch.mm(a, b)
        reps = max(3, int(1e11 // (2 * m * k * n)))  # about a second per round
        flops = 2.0 * m * k * n * reps
        rounds = []
        for _ in range(case.get("rounds", 3)):  # best round: the peak, not a dip
            with Clock() as c:
                for _ in range(reps):
                    torch.mm(a, b)
            rounds.append((flops / c.wall / 1e9, flops / c.cpu / 1e9))
        out.append({"shape": [m, k, n], "gflops_wall": max(r[0] for r in rounds),
                    "gflops_per_cpu_s": max(r[1] for r in rounds)})
    best = max(out, key=lambda r: r["gflops_wall"])
    return {"shapes": out, "gflops_wall": best["gflops_wall"],
            "gflops_per_cpu_s": max(r["gflops_per_cpu_s"] for r in out),
            "threads": torch.get_num_threads()}


def load_samples(case: dict):
    from calimon.data.registry import load_benchmark
    from calimon.selection import select_pairs

    return select_pairs(load_benchmark(case.get("benchmark", "humaneval-pairs")),
                        case.get("n", 8), case.get("seed", 0))


def stretch(samples, tokenizer, encoder, length: int):
    """Samples whose encoded prompt has about `length` tokens: each response is the
    concatenation of the benchmark's responses, cut to the token budget."""
    from calimon.samples import Sample

    pool = "\n\n".join(s.response for s in samples)
    pool_ids = tokenizer(pool, add_special_tokens=False)["input_ids"]
    out = []
    for i, s in enumerate(samples):
        fixed = len(encoder.encode(s.request, "").ids)
        want = max(8, length - fixed)
        ids = (pool_ids[i * 97:] + pool_ids) * (want // max(len(pool_ids), 1) + 2)
        text = tokenizer.decode(ids[:want])
        out.append(Sample(id=f"{s.id}-L{length}", request=s.request, response=text,
                          label=s.label, category=s.category, task=s.task,
                          pair_id=f"{s.pair_id}-L{length}"))
    return out


class Timed:
    """Wraps a backend: times its model calls and records prompt/generated token counts."""

    def __init__(self, inner):
        self.inner = inner
        self.model_ref, self.wall, self.cpu, self.tree_cpu = inner.model_ref, 0.0, 0.0, 0.0
        self.prompt_lengths: list[int] = []
        self.generated: list[int] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _run(self, fn, *args):
        with Clock() as c:
            out = fn(*args)
        self.wall += c.wall
        self.cpu += c.cpu
        self.tree_cpu += c.tree_cpu
        return out

    def next_token_logprobs(self, prompts, prefix_len=0):
        self.prompt_lengths += [len(p) for p in prompts]
        return self._run(self.inner.next_token_logprobs, prompts, prefix_len)

    def generate(self, prompts, max_new_tokens):
        self.prompt_lengths += [len(p) for p in prompts]
        out = self._run(self.inner.generate, prompts, max_new_tokens)
        self.generated += [len(x) for x in out]
        return out

    def capture(self, prompts, prefix_len, spec, spans):
        self.prompt_lengths += [len(p) for p in prompts]
        return self._run(self.inner.capture, prompts, prefix_len, spec, spans)


def make_backend(case: dict):
    """The case's backend, made by `calimon.scoring.backends.build_backend` from the case's options."""
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec

    name = case.get("backend", "transformers")
    if name == "http":
        opts = {"base_url": case["base_url"], "served_model": "smollm2-135m",
                "concurrency": case.get("concurrency", 8)}
    elif name == "vllm":
        opts = {"max_model_len": case.get("max_input_tokens"),
                "kv_cache_gib": case.get("kv_cache_gib", 2),
                "max_num_seqs": case.get("max_batch_size")}
    else:
        opts = {"device": "cpu", "batch_tokens": case.get("batch_tokens", 8192)}
        if case.get("max_batch_size"):
            opts["max_batch_size"] = case["max_batch_size"]
    be = build_backend(MonitorSpec(model=case.get("model", "smollm2-135m"), backend=name,
                                   options=opts))
    if name == "transformers" and case.get("threads"):
        import torch

        torch.set_num_threads(case["threads"])
    return be


def monitor_case(case: dict) -> dict:
    from calimon.models import resolve_model
    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor

    model = resolve_model(case.get("model", "smollm2-135m"))
    shape = Shape.from_config(model.path)
    with RssSampler() as rss:
        with Clock() as load:
            backend = make_backend(case)
            for attr in ("model", "llm"):  # load the weights / start the engine now
                if hasattr(type(backend), attr):
                    getattr(backend, attr)
        timed = Timed(backend)
        mon = Monitor(timed, load_prompt(case["prompt"]), case["readout"],
                      max_input_tokens=case.get("max_input_tokens"))
        samples = load_samples(case)
        if case.get("length"):
            samples = stretch(samples, backend.tokenizer, mon.encoder, case["length"])
        mon.score(samples[:1])  # warm-up (kernels, prefix cache), not timed
        timed.wall = timed.cpu = timed.tree_cpu = 0.0
        timed.prompt_lengths, timed.generated = [], []
        with Clock() as total:
            verdicts = mon.score(samples)
        if hasattr(backend, "close"):
            backend.close()
    lengths = timed.prompt_lengths
    if case["readout"] == "binary":
        flops = generation_flops(shape, lengths, timed.generated)
    else:  # the prefix was computed in the warm-up; only tails are this run's work
        flops = prefill_readout_flops(shape, lengths, mon.encoder.prefix_len) - \
            shape.tokens(0, mon.encoder.prefix_len)
    return {"samples": len(samples), "seconds": total.wall, "cpu_seconds": total.cpu,
            "model_seconds": timed.wall, "model_cpu_seconds": timed.cpu,
            "tree_cpu_seconds": total.tree_cpu, "model_tree_cpu_seconds": timed.tree_cpu,
            "load_seconds": load.wall, "prompt_tokens": sum(lengths),
            "generated_tokens": sum(timed.generated), "prefix_len": mon.encoder.prefix_len,
            "flops": flops, "statuses": _statuses(verdicts),
            "p_raw": [v.p_raw for v in verdicts], "ids": [s.id for s in samples],
            "max_batch_size": getattr(backend, "max_batch_size", None), **rss.result()}


def forward_case(case: dict) -> dict:
    """A plain loop: one prompt (the benchmark's median-length verdict prompt, no prefix
    reuse) through the model, logits at its last position, `reps` times. `compile` runs the
    decoder under torch.compile (static shape; its compile time is reported, not counted)."""
    import statistics

    import torch

    from calimon.models import resolve_model
    from calimon.prompts import encoder_for, load_prompt
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec

    model = resolve_model(case.get("model", "smollm2-135m"))
    shape = Shape.from_config(model.path)
    backend = build_backend(MonitorSpec(model=case.get("model", "smollm2-135m"),
                                        options={"device": "cpu"}))
    net = backend.model
    enc = encoder_for(backend, load_prompt(case["prompt"]), "verdict",
                      model.config.max_input_tokens)
    prompts = sorted((enc.encode(s.request, s.response).ids for s in load_samples(case)),
                     key=len)
    prompt = prompts[len(prompts) // 2]
    n, ids = len(prompt), torch.tensor([prompt])

    def once(decoder):
        with torch.inference_mode():
            hidden = decoder(input_ids=ids).last_hidden_state
            return torch.log_softmax(net.lm_head(hidden[:, -1]).float(), dim=-1)

    eager = once(net.model)
    decoder = torch.compile(net.model) if case.get("compile") else net.model
    with Clock() as first:
        once(decoder)  # warm-up; under compile, the compilation
    times = []
    for _ in range(case.get("reps", 5)):
        with Clock() as c:
            got = once(decoder)
        times.append((c.wall, c.cpu))
    flops = shape.tokens(0, n) + shape.logits(1)
    wall = statistics.median(t[0] for t in times)
    cpu = statistics.median(t[1] for t in times)
    return {"passes": len(times), "prompt_tokens": n, "flops_per_pass": flops,
            "first_pass_seconds": first.wall, "median_seconds": wall,
            "median_cpu_seconds": cpu, "best_seconds": min(t[0] for t in times),
            "gflops_wall": flops / wall / 1e9, "gflops_per_cpu_s": flops / cpu / 1e9,
            "gflops_best": flops / min(t[0] for t in times) / 1e9,
            "max_abs_logprob_diff_vs_eager": float((got - eager).abs().max()),
            "pass_seconds": [t[0] for t in times],
            "compiled": bool(case.get("compile"))}


def _statuses(verdicts) -> dict:
    out: dict[str, int] = {}
    for v in verdicts:
        out[v.status] = out.get(v.status, 0) + 1
    return out


def probe_case(case: dict) -> dict:
    """The capture pass a probe head reads (pooled states of one layer) plus a logistic head
    with fixed stand-in weights; `truncate` keeps only the layers up to the probe's layer."""
    import numpy as np

    from calimon.models import resolve_model
    from calimon.prompts import encoder_for, load_prompt
    from calimon.scoring.probes.capture import CaptureSpec

    model = resolve_model(case.get("model", "smollm2-135m"))
    shape = Shape.from_config(model.path)
    layer = case.get("layer", 12)
    with RssSampler() as rss:
        backend = make_backend(case)
        net = backend.model
        if case.get("truncate"):
            net.model.layers = net.model.layers[:layer]
        enc = encoder_for(backend, load_prompt(case["prompt"]), "verdict",
                          case.get("max_input_tokens") or model.config.max_input_tokens)
        samples = load_samples(case)
        encoded = [enc.encode(s.request, s.response) for s in samples]
        spec = CaptureSpec(layers=(layer,), pooling=("mean",))
        w = np.random.default_rng(0).normal(size=shape.hidden) / shape.hidden ** 0.5

        def run(items):
            with Clock() as c:
                got = backend.capture([e.ids for e in items], enc.prefix_len, spec,
                                      [(e.response_start, e.response_end) for e in items])
                p = 1 / (1 + np.exp(-(got.features(layer, "mean") @ w)))
            return p, c

        run(encoded[:1])
        p, clock = run(encoded)
    lengths = [len(e.ids) for e in encoded]
    layers = layer if case.get("truncate") else shape.layers
    flops = probe_flops(shape, lengths, layers, enc.prefix_len) - \
        shape.tokens(0, enc.prefix_len, layers)
    if not case.get("truncate"):
        flops += shape.logits(len(lengths))
    return {"samples": len(samples), "seconds": clock.wall, "cpu_seconds": clock.cpu,
            "model_seconds": clock.wall, "model_cpu_seconds": clock.cpu,
            "prompt_tokens": sum(lengths), "generated_tokens": 0, "flops": flops,
            "layers_run": layers, "p_head": [float(x) for x in p], **rss.result()}


def store_case(case: dict) -> dict:
    import tempfile

    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor, score_with_store
    from calimon.scoring.store import RunStore

    backend = make_backend(case)
    mon = Monitor(backend, load_prompt(case["prompt"]), case["readout"])
    samples = load_samples(case)
    with tempfile.TemporaryDirectory() as tmp, RunStore(Path(tmp) / "s.sqlite") as st:
        with Clock() as first:
            score_with_store(mon, samples, st)
        calls = backend.forward_calls
        with Clock() as second:
            score_with_store(mon, samples, st)
    return {"samples": len(samples), "first_calls": calls,
            "second_calls": backend.forward_calls - calls, "first_seconds": first.wall,
            "second_seconds": second.wall}


def profile_case(case: dict) -> dict:
    """Self CPU time of the verdict readout by operator, grouped into kinds."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor

    backend = make_backend(case)
    mon = Monitor(backend, load_prompt(case["prompt"]), "verdict")
    samples = load_samples(case)
    mon.score(samples[:1])
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.inference_mode():
        with Clock() as c:
            mon.score(samples)
    ops = {}
    for evt in prof.key_averages():
        ops[evt.key] = ops.get(evt.key, 0.0) + evt.self_cpu_time_total / 1e6
    total = sum(ops.values())
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:15]
    kinds: dict[str, float] = {}
    for name, secs in ops.items():
        kinds[op_kind(name)] = kinds.get(op_kind(name), 0.0) + secs
    return {"seconds": c.wall, "profiled_cpu_seconds": total,
            "top": [[k, v, v / total] for k, v in top],
            "kinds": {k: [v, v / total] for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}}


def op_kind(name: str) -> str:
    n = name.lower()
    if any(k in n for k in ("::mm", "addmm", "::matmul", "::linear", "::bmm", "baddbmm")):
        return "matmul (linear layers, lm_head)"
    if "attention" in n or "softmax" in n and "log_softmax" not in n:
        return "attention (sdpa)"
    if any(k in n for k in ("copy_", "::cat", "clone", "contiguous", "index", "repeat",
                            "expand", "to_copy", "empty", "fill", "zero")):
        return "copies / cache / indexing"
    if any(k in n for k in ("mul", "add", "silu", "rsqrt", "pow", "mean", "neg", "sub",
                            "div", "cos", "sin", "exp", "log_softmax", "where")):
        return "elementwise (norms, rope, act)"
    return "other"


KINDS = {"matmul": matmul_case, "monitor": monitor_case, "probe": probe_case,
         "store": store_case, "profile": profile_case, "forward": forward_case}


def main() -> None:
    case = json.loads(sys.argv[1])
    if case.get("threads"):
        import torch

        torch.set_num_threads(case["threads"])
    load0 = os.getloadavg()[0]
    with Clock() as c:
        result = KINDS[case["kind"]](case)
    result.update(case=case, case_seconds=c.wall, loadavg_start=load0,
                  loadavg_end=os.getloadavg()[0])
    print("PERF_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
