"""Prefill throughput of calimon's scoring paths on a random-weight Qwen3-4B (bf16), one GPU run.

    python benchmarks/gpu/run_gpu_perf.py                      # -> benchmarks/results/perf-gpu.md
    python benchmarks/gpu/run_gpu_perf.py --peak-tflops 989.5  # a GPU missing from PEAKS
    python benchmarks/gpu/run_gpu_perf.py --tiny --out runs/perf-gpu-tiny.md  # CPU smoke run

Needs torch and transformers; no download, no network: the model is Qwen3-4B's published
configuration (qwen3-4b.json, sources named there) with random weights, so every figure is a cost,
never a score. The calimon rows run calimon's own code from this repository
(`TransformersBackend.next_token_logprobs`: the verdict readout; `TransformersBackend.capture`: a
probe head); where calimon's dependencies are missing they say why and the plain rows still run.

For each prompt length (default 600 and 4,000 tokens): the verdict readout (one prefill, logits at
the answer position only; plain: ``model(input_ids, logits_to_keep=1)``), the probe path stopped
at its layer (decoder cut after --probe-layer, hidden states pooled over the response, no output
layer), batch sizes, equal- against mixed-length (padded) batches; samples/s, prompt tokens/s,
TFLOP/s of useful FLOPs, MFU against the GPU's dense bf16 peak (n/a for a device missing from
PEAKS unless --peak-tflops is given) and torch.cuda.max_memory_allocated. Each case: --warmup
untimed runs, then the median of --repeats timed runs (torch.cuda.synchronize around each).
benchmarks/results/perf-gpu.md is its run on an H100 (benchmarks/gpu/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))  # flops.py: the FLOP count, stdlib only

import flops  # noqa: E402
import gpu_levers  # noqa: E402
from gpu_agree import agreement, agreement_line  # noqa: E402
from gpu_plan import (  # noqa: E402,F401 - re-exported for the tests
    CALIMON_PATHS,
    Case,
    estimate_seconds,
    longest,
    mixed_lengths,
    padding_share,
    plan,
    plan_text,
    samples_at,
    sorted_batches,
)
from gpu_report import COLUMNS, PEAKS, device_line, device_peak, render  # noqa: E402,F401

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "perf-gpu.md"

# Test-only model: the same architecture, small enough for a CPU in a few seconds.
TINY = {"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": 4096, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True}



@dataclass(frozen=True)
class Shape(flops.Shape):
    """A Qwen3 decoder's matmul shapes. FLOPs are benchmarks/perf/flops.py's count (weight
    matmuls and causal attention over the real context, 2 FLOPs per multiply-add; norms, rotary,
    activations and padding not); this adds tied embeddings and the parameter count."""

    tied: bool = False

    @classmethod
    def from_config(cls, cfg: dict) -> Shape:
        """The shape of a Qwen3Config given as a dict."""
        base = flops.Shape.from_dict(cfg)
        return cls(**vars(base), tied=bool(cfg.get("tie_word_embeddings", False)))

    def parameters(self) -> tuple[int, int]:
        """(all parameters, non-embedding parameters), norms included, tied embeddings once."""
        per_layer = self.layer_params + 2 * self.hidden + 2 * self.head_dim  # + 4 RMSNorms
        body = self.layers * per_layer + self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return body + embeddings, body


class Bench:
    """The model, its prompts and the calimon pieces, shared by every case of one run."""

    def __init__(self, args, cfg: dict, cases: list[Case]):
        import torch
        from transformers import AutoModelForCausalLM, Qwen3Config

        self.torch, self.args = torch, args
        self.cuda = args.device.startswith("cuda")
        if self.cuda and torch.device(args.device).index is not None:  # "cuda": the current one
            torch.cuda.set_device(torch.device(args.device))
        self.shape = Shape.from_config(cfg)
        kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
        torch.manual_seed(args.seed)
        with torch.device(args.device):
            self.model = AutoModelForCausalLM.from_config(
                Qwen3Config(**kwargs), dtype=getattr(torch, args.dtype),
                attn_implementation=args.attn).eval()
        self.weights_bytes = torch.cuda.memory_allocated() if self.cuda else None
        gen = torch.Generator().manual_seed(args.seed)
        self.prefix = torch.randint(0, self.shape.vocab, (args.prefix_tokens,), generator=gen)
        rows = max(len(c.lengths) for c in cases)
        self.tails = torch.randint(0, self.shape.vocab, (rows, longest(cases)), generator=gen)
        self.calimon, self.calimon_error = _calimon_parts()
        self.nonfinite: set[str] = set()
        self.checking = False  # outputs are checked in the untimed warm-up runs only

    def prompts(self, lengths) -> list[list[int]]:
        """Prompt i: the shared prefix, then random tokens up to lengths[i]."""
        p = self.args.prefix_tokens
        return [self.prefix.tolist() + self.tails[i, :n - p].tolist()
                for i, n in enumerate(lengths)]

    def spans(self, lengths) -> list[tuple[int, int]]:
        """The response a probe pools over: the second half of each prompt after the prefix."""
        p = self.args.prefix_tokens
        return [(p + (n - p) // 2, n) for n in lengths]

    def _calimon_runner(self, case: Case):
        parts = self.calimon
        ref = parts.model_ref(self.args)
        opts = dict(CALIMON_PATHS[case.path])
        if case.batch is not None:
            opts.update(max_batch_size=case.batch, batch_tokens=case.batch * max(case.lengths))
        opts.update(case.opts)
        if case.section.startswith("default batching"):
            opts.update(getattr(self, "best_opts", {}))
        backend = parts.Backend.from_loaded(ref, self.model, types.SimpleNamespace(pad_token_id=0),
                                            **opts)
        prompts, p = self.prompts(case.lengths), self.args.prefix_tokens
        spec = parts.CaptureSpec(layers=(self.args.probe_layer,), pooling=("mean",))
        spans = self.spans(case.lengths)

        def run():
            out = backend.next_token_logprobs(prompts, prefix_len=p) if case.kind == "verdict" \
                else backend.capture(prompts, p, spec, spans).pooled
            if opts.get("kernels", "auto") not in ("auto", backend.kernels_used):
                raise RuntimeError(f"{opts['kernels']} kernels not available here "
                                   f"(fused: {backend.kernels_used})")
            self._check(case, out)
        return run

    def _plain_runner(self, case: Case):
        torch, model = self.torch, self.model
        forward = gpu_levers.plain_forward(self, case)
        dev, prompts = self.args.device, self.prompts(case.lengths)
        spans = self.spans(case.lengths)
        groups = [(idx, *_right_padded([prompts[i] for i in idx], dev, torch))
                  for idx in sorted_batches(case.lengths, case.batch)]  # on the device, untimed

        def run():
            with torch.inference_mode():
                for idx, ids, mask, last in groups:
                    if case.kind == "probe":
                        h = model.model(input_ids=ids, attention_mask=mask,
                                        use_cache=False).last_hidden_state
                        out = torch.stack([h[r, spans[i][0]:spans[i][1]].float().mean(0)
                                           for r, i in enumerate(idx)])
                    elif mask is None:
                        logits = forward(input_ids=ids, use_cache=False,
                                         logits_to_keep=1).logits
                        out = torch.log_softmax(logits[:, -1].float(), dim=-1)
                    else:
                        h = model.model(input_ids=ids, attention_mask=mask,
                                        use_cache=False).last_hidden_state
                        logits = model.lm_head(h[torch.arange(len(idx), device=dev), last])
                        out = torch.log_softmax(logits.float(), dim=-1)
                    self._check(case, out)
        return run

    def _check(self, case: Case, out) -> None:
        if self.checking and not bool(self.torch.isfinite(self.torch.as_tensor(out)).all()):
            self.nonfinite.add(f"{case.section} / {case.path} / {case.label}")

    def measure(self, case: Case) -> dict:
        """Median seconds of --repeats timed runs after --warmup untimed ones, and peak memory."""
        torch = self.torch
        sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        cut = self.args.probe_layer if case.kind == "probe" else None
        with _stopped_at(self.model, cut):
            if self.cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            run = (self._calimon_runner if case.calimon else self._plain_runner)(case)
            self.checking = True
            sync()
            first = time.perf_counter()
            for _ in range(self.args.warmup):
                run()
            sync()
            warmup_s = time.perf_counter() - first
            self.checking = False
            times = []
            for _ in range(self.args.repeats):
                sync()
                start = time.perf_counter()
                run()
                sync()
                times.append(time.perf_counter() - start)
        peak = torch.cuda.max_memory_allocated() if self.cuda else None
        return {"times": times, "peak_bytes": peak, "warmup_s": warmup_s}


def _right_padded(prompts, dev, torch):
    """(ids, attention mask or None when all rows are full, index of each row's last token)."""
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, :len(p)] = torch.tensor(p)
        mask[r, :len(p)] = 1
    last = torch.tensor(lengths, device=dev) - 1
    return ids.to(dev), (None if min(lengths) == width else mask.to(dev)), last


@contextlib.contextmanager
def _stopped_at(model, layer: int | None):
    """The decoder cut after block `layer` (None: whole) for the duration of the block."""
    if layer is None:
        yield
        return
    import torch

    inner = model.model
    full = inner.layers
    inner.layers = torch.nn.ModuleList(list(full)[:layer])
    try:
        yield
    finally:
        inner.layers = full


def _calimon_parts():
    """(namespace of the calimon pieces used, None) or (None, why calimon cannot be imported)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        import calimon
        from calimon.models import ModelConfig, ModelSource, ResolvedModel
        from calimon.scoring.backends.capture import CaptureSpec
        from calimon.scoring.backends.fused import fuse
        from calimon.scoring.backends.transformers_backend import TransformersBackend
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"

    def model_ref(args):
        cfg = ModelConfig(version=1, name=f"{args.config}-random", source=ModelSource(kind="local"),
                          path=str(HERE), dtype=args.dtype, max_input_tokens=args.longest)
        return ResolvedModel(cfg.name, HERE, f"random-init-seed-{args.seed}", cfg)

    return types.SimpleNamespace(Backend=TransformersBackend, CaptureSpec=CaptureSpec, fuse=fuse,
                                 model_ref=model_ref, version=calimon.__version__), None


# -- running the cases -----------------------------------------------------------------------------
def run_case(bench: Bench, case: Case) -> dict:
    """The case's measurement, or {"error": why it has none} (calimon missing, out of memory,
    or any other failure, printed in full to stderr) so that one failed case keeps the rest."""
    if case.calimon and bench.calimon is None:
        return {"error": f"not run: calimon not importable ({bench.calimon_error})"}
    try:
        return bench.measure(case)
    except Exception as exc:  # noqa: BLE001 - recorded in the table, traceback on stderr
        import traceback

        traceback.print_exc()
        if bench.cuda:
            bench.torch.cuda.empty_cache()
        why = f"error: {type(exc).__name__}: {exc}"[:160].replace("|", "/").replace("\n", " ")
        return {"error": "out of memory" if "OutOfMemory" in type(exc).__name__ else why}


def _num(x: float) -> str:
    return f"{x:.4g}"


def default_batch(bench: Bench, length: int) -> int:
    """Prompts per forward pass under calimon's default batching (equal lengths): at most
    max_batch_size, at most batch_tokens padded tokens."""
    backend = bench.calimon.Backend.from_loaded(bench.calimon.model_ref(bench.args), bench.model,
                                                types.SimpleNamespace(pad_token_id=0))
    return max(1, min(backend.max_batch_size, backend.batch_tokens // length))


def table_row(bench: Bench, case: Case, res: dict, peak: float | None) -> list[str]:
    """One markdown row (COLUMNS) of a measured case."""
    lengths, p = case.lengths, bench.args.prefix_tokens
    mean = sum(lengths) / len(lengths)
    tokens = str(lengths[0]) if len(set(lengths)) == 1 else \
        f"{min(lengths)}-{max(lengths)} (mean {mean:.0f})"
    if case.label.startswith("humaneval-pairs"):
        tokens = f"{case.label}: {tokens}"
    default = default_batch(bench, lengths[0]) if bench.calimon and case.batch is None else "?"
    batch = gpu_levers.batch_cell(case, default)
    computed = [n - p for n in lengths] if case.calimon else list(lengths)
    pad = padding_share(computed, case.batch) if case.batch and not case.packed else 0.0
    head = [case.path, tokens, batch, str(len(lengths)), f"{100 * pad:.0f}%"]
    if "error" in res:
        return head + [res["error"]] + ["-"] * (len(COLUMNS) - len(head) - 1)
    t = statistics.median(res["times"])
    tflops = case.flops(bench.shape, p, bench.args.probe_layer) / t / 1e12
    spread = f"{_num(t)} ({_num(min(res['times']))}-{_num(max(res['times']))})"
    mfu = f"{100 * tflops / peak:.1f}%" if peak else "n/a"
    mem = _num(res["peak_bytes"] / 2**30) if res["peak_bytes"] is not None else "n/a"
    return head + [spread, _num(len(lengths) / t), _num(sum(lengths) / t), _num(tflops), mfu, mem]


# -- command line ----------------------------------------------------------------------------------
DEFAULTS = {
    "qwen3-4b": {"dtype": "bfloat16", "lengths": [600, 4000, 16000], "batch_sizes": [8],
                 "padding_batch_sizes": [32], "padding_max_length": 4000, "samples": 32,
                 "prefix_tokens": 218, "repeats": 2, "warmup": 1, "real_scales": [1, 4, 16],
                 "real_samples": [32, 16, 8], "real_batch": 8, "real_unit": 1.0},
    "tiny": {"dtype": "float32", "lengths": [48, 96], "batch_sizes": [1, 2, 4],
             "padding_batch_sizes": [2, 4], "padding_max_length": 10**6, "samples": 4,
             "prefix_tokens": 8, "repeats": 2, "warmup": 1, "real_scales": [1, 4],
             "real_samples": [4, 3], "real_batch": 2, "real_unit": 0.05},
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options, with the config's defaults filled in and checked."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(DEFAULTS), default="qwen3-4b")
    ap.add_argument("--tiny", action="store_true", help="same as --config tiny (CPU, fp32)")
    ap.add_argument("--device", help="default: cuda (qwen3-4b needs it unless set to cpu)")
    ap.add_argument("--dtype", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--attn", default="sdpa", help="transformers attn_implementation")
    ap.add_argument("--lengths", type=int, nargs="+", help="prompt tokens per transcript")
    ap.add_argument("--batch-sizes", type=int, nargs="+")
    ap.add_argument("--padding-batch-sizes", type=int, nargs="+")
    ap.add_argument("--padding-max-length", type=int, help="padding section: lengths up to this")
    ap.add_argument("--samples", type=int, help="prompts per case (fewer above 4,000 tokens)")
    ap.add_argument("--real-scales", type=float, nargs="+", help="real-length section: "
                    "humaneval-pairs' lengths times each of these")
    ap.add_argument("--real-samples", type=int, nargs="+", help="prompts at each --real-scales")
    ap.add_argument("--real-batch", type=int, help="real-length section: batch size")
    ap.add_argument("--real-unit", type=float, help="scale applied to the real lengths first "
                    "(the tiny config shrinks them)")
    ap.add_argument("--prefix-tokens", type=int, help="shared template prefix (default 218: the "
                    "direct prompt's, counted with the embedded SmolLM2 tokenizer)")
    ap.add_argument("--probe-layer", type=int, help="default: half the layers")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--peak-tflops", type=float, help="dense peak of this device, TFLOP/s")
    ap.add_argument("--plan", action="store_true", help="print the cases and the estimated run "
                    "time at --assume-tflops, and run nothing")
    ap.add_argument("--assume-tflops", type=float, default=300.0,
                    help="--plan: computed TFLOP/s assumed (about what an H200 reached)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--suite", choices=["default", "levers"], default="default",
                    help="levers: each speed lever on and off, and the GPU default batching "
                    "(gpu_levers.py; benchmarks/results/perf-gpu-levers.md)")
    ap.add_argument("--time-budget", type=float, default=float("inf"),
                    help="seconds after which the remaining cases are skipped (rows say so); "
                    "the report is rewritten after every case")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.tiny:
        args.config = "tiny"
    if args.suite == "levers":
        for key, value in gpu_levers.DEFAULTS.get(args.config, {}).items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    for key, value in DEFAULTS[args.config].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return _check_args(ap, args)


def _check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    if args.device is None and not args.plan:
        import torch

        if args.config != "tiny" and not torch.cuda.is_available():
            ap.error("no CUDA device: the Qwen3-4B run needs a GPU (--device cpu forces it; "
                     "--tiny is the CPU smoke run; --plan runs nothing)")
        args.device = "cuda" if args.config != "tiny" else "cpu"
    layers = TINY["num_hidden_layers"] if args.config == "tiny" else 36
    args.probe_layer = args.probe_layer or max(1, layers // 2)
    if not 1 <= args.probe_layer <= layers:
        ap.error(f"--probe-layer must lie in 1..{layers}")
    padded = [x for x in args.lengths if x <= args.padding_max_length]
    if (padded and min(padded) // 2 <= args.prefix_tokens) or \
            min(args.lengths) <= args.prefix_tokens:
        ap.error("every length must exceed --prefix-tokens, and twice it in the padding "
                 "section (mixed lengths start at L/2)")
    if len(args.real_scales) != len(args.real_samples):
        ap.error("--real-samples needs one count per --real-scales value")
    if min([args.samples, args.repeats, args.real_batch, *args.real_samples, *args.batch_sizes,
            *args.padding_batch_sizes]) < 1:
        ap.error("--samples, --repeats, --real-samples and batch sizes must be at least 1")
    if args.warmup < 1:
        ap.error("--warmup must be at least 1 (the calimon path computes its shared prefix then)")
    if args.out is None:
        args.out = DEFAULT_OUT if args.config != "tiny" else ROOT / "runs" / "perf-gpu-tiny.md"
    return args


def load_config(name: str) -> tuple[dict, dict]:
    """(the Qwen3Config values, what is known about them) for --config."""
    if name == "tiny":
        return dict(TINY), {"source_name": "tiny (run_gpu_perf.py TINY, for tests)"}
    meta = json.loads((HERE / f"{name}.json").read_text())
    meta["source_name"] = f"benchmarks/gpu/{name}.json"
    return dict(meta["config"]), meta


def main(argv: list[str] | None = None) -> Path:
    """Run every case and write the report; returns its path."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    cfg, meta = load_config(args.config)
    cases = (plan if args.suite == "default" else gpu_levers.plan_cases)(
        args, Shape.from_config(cfg))
    if args.plan:
        print(plan_text(args, Shape.from_config(cfg), cases))
        return args.out
    args.longest = longest(cases)
    bench = Bench(args, cfg, cases)
    peak_text, peak = device_line(bench, device_peak(bench.torch.cuda.get_device_name())
                                  if bench.cuda else None)
    sections: dict[str, list[list[str]]] = {}
    work = sum(c.flops(bench.shape, args.prefix_tokens, args.probe_layer) for c in cases)
    print(f"{len(cases)} cases, {work * (args.warmup + args.repeats) / 1e15:.3g} PFLOP of useful "
          f"work with warm-ups, on {peak_text}; estimated "
          f"{estimate_seconds(cases, args, bench.shape, args.assume_tflops):.0f} s at "
          f"{args.assume_tflops:g} TFLOP/s", file=sys.stderr, flush=True)
    notes: list[str] = []
    if args.suite == "levers":
        notes.append(gpu_levers.agreement_paragraph(bench))
    write = gpu_levers.writer(bench, lambda: render(bench, meta, sections, argv, peak_text,
                                                          notes=notes))
    t0 = time.perf_counter()
    for case in cases:
        start = time.perf_counter()
        if start - t0 + gpu_levers.NEEDS_S.get(case.path, 0) > args.time_budget:
            res = {"error": f"skipped: past --time-budget {args.time_budget:g} s"}
        else:
            res = run_case(bench, case)
            gpu_levers.track(bench, case, res)
        row = table_row(bench, case, res, peak)
        sections.setdefault(case.section, []).append(row)
        if "warmup_s" in res and case.path in gpu_levers.SLOW_FIRST:
            notes.append(f"First (warm-up) run of {case.path}, {case.label} at "
                         f"{max(case.lengths)} tokens: {res['warmup_s']:.1f} s.")
        print(f"{case.section} | {' | '.join(row)} [{time.perf_counter() - start:.1f} s]",
              file=sys.stderr, flush=True)
        write()
    if getattr(bench, "best_path", None):
        notes.append(f"Default batching ran with the options of {bench.best_path} (the fastest "
                     f"calimon lever at {max(args.lengths)} tokens): {bench.best_opts}.")
    if args.suite == "default":
        try:
            agree = agreement(bench)
        except Exception as exc:  # noqa: BLE001 - recorded in the report, traceback on stderr
            import traceback

            traceback.print_exc()
            agree = {"error": f"{type(exc).__name__}: {exc}"[:160]}
        print(agreement_line(agree, args.dtype), file=sys.stderr, flush=True)
        notes.insert(0, agreement_line(agree, args.dtype))
    write()
    print(f"wrote {args.out}", file=sys.stderr)
    return args.out


if __name__ == "__main__":
    main()
