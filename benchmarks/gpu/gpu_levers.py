"""The levers suite of run_gpu_perf.py (``--suite levers``): what makes calimon's scoring pass
faster on a GPU, each lever on and off, and the default batching against fixed batches.

Sections:
- levers (verdict readout): equal-length prompts at --lengths, batch --real-batch, on the plain
  loop (eager; with liger-kernel's fused kernels; with calimon's torch.compile'd kernels) and on
  calimon (eager; varlen attention; + liger; + compile): `CALIMON_PATHS`, `PLAIN_KERNELS`;
- levers, real lengths: humaneval-pairs' lengths (packed batches of different lengths);
- default batching: calimon as it stands (its kernels and varlen choices) at token budgets per
  pass (`BUDGETS`), a fixed batch of 8, and its default (`gpu_defaults`);
- whole-model compile: the plain loop under ``torch.compile(mode="reduce-overhead")`` (CUDA
  graphs) at one shape bucket, compiled in its warm-up (last: it costs a minute or more).

`agreement_rows` compares each lever's log-probs with the plain eager pass.
"""

from __future__ import annotations

import sys
import time

from gpu_plan import GRAPH_PATH, PLAIN_KERNELS, Case, real_lengths, samples_at

# the suite's own defaults on the full model (the rest as run_gpu_perf.DEFAULTS)
DEFAULTS = {"qwen3-4b": {"lengths": [600, 4000], "real_scales": [1, 4], "real_samples": [32, 16]}}

# the default-batching section: (prompt tokens, samples, fixed batch sizes) next to the default
# (13 at 600 and 2 at 4,000 were the defaults before; 8 the best fixed batch of perf-gpu.md)
SWEEP = ((600, 64, (8, 13, 32, 64)), (4000, 32, (2, 4, 8, 16)))
NEEDS_S = {GRAPH_PATH: 150}  # seconds a case needs left of --time-budget to start
PLAIN_LEVERS = ("plain", "plain liger", "plain compile")
CALIMON_LEVERS = ("calimon eager", "calimon varlen", "calimon liger", "calimon compile")


SLOW_FIRST = ("plain liger", "plain compile", "calimon liger", "calimon compile", GRAPH_PATH)


def plan_cases(args, shape=None) -> list[Case]:
    """Every case of the levers suite, in the order they run (``shape``: unused, as in
    gpu_plan.plan)."""
    b, cases = args.real_batch, []
    for L in args.lengths:
        eq = (L,) * samples_at(args, L)
        cases += [Case(f"levers (verdict readout, batch {b})", p, "verdict", eq, b, "equal")
                  for p in (*PLAIN_LEVERS, *CALIMON_LEVERS)]
    for scale, n in zip(args.real_scales, args.real_samples, strict=True):
        lengths = real_lengths(n, scale * args.real_unit, args.seed, args.prefix_tokens)
        cases += [Case(f"levers, real lengths (humaneval-pairs, batch {b})", p, "verdict",
                       lengths, b, f"humaneval-pairs x{scale:g}")
                  for p in ("plain", *CALIMON_LEVERS)]
    for L, n, sizes in _sweep(args):
        eq, sec = (L,) * n, "default batching (the fastest calimon lever)"
        cases.append(Case(sec, "calimon", "verdict", eq, None, "calimon default"))
        cases += [Case(sec, "calimon", "verdict", eq, b, "fixed") for b in sizes if b <= n]
    L = min(args.lengths)
    cases.append(Case("whole-model compile, CUDA graphs, one shape bucket", GRAPH_PATH,
                      "verdict", (L,) * samples_at(args, L), b, f"bucket {b} x {L}"))
    return cases


def _sweep(args):
    if args.config == "tiny":
        return [(L, args.samples, (1, 2)) for L in args.lengths]
    return SWEEP


def batch_cell(case: Case, default_rows) -> str:
    """The batch column: the batch size, or calimon's default with the size it gave."""
    return f"{default_rows} (calimon default)" if case.batch is None else str(case.batch)


def track(bench, case: Case, res: dict) -> None:
    """After each case: the fastest calimon lever at the longest equal length of the levers
    section becomes the options of the default-batching section (`bench.best_opts`)."""
    from gpu_plan import CALIMON_PATHS

    if not case.section.startswith("levers (") or case.path not in CALIMON_LEVERS \
            or "times" not in res or max(case.lengths) < max(bench.args.lengths):
        return
    t = sorted(res["times"])[len(res["times"]) // 2]
    if t < getattr(bench, "best_time", float("inf")):
        bench.best_time, bench.best_path = t, case.path
        bench.best_opts = dict(CALIMON_PATHS[case.path])


def plain_forward(bench, case: Case):
    """The callable the plain loop runs for this case: the model with the path's kernels
    fused (`PLAIN_KERNELS`), or compiled whole for `GRAPH_PATH`."""
    fuse = bench.calimon.fuse if bench.calimon else None
    if case.path == GRAPH_PATH:
        if not bench.cuda:
            raise RuntimeError("the CUDA-graph case needs a CUDA device")
        if fuse:
            fuse(bench.model, "none")
        if getattr(bench, "graph_model", None) is None:
            bench.graph_model = bench.torch.compile(bench.model, mode="reduce-overhead",
                                                    dynamic=False)
        return bench.graph_model
    how = PLAIN_KERNELS[case.path]
    if fuse is None:
        if how != "none":
            raise RuntimeError(f"{case.path} needs calimon's fused kernels (calimon missing)")
        return bench.model
    used = fuse(bench.model, how)
    if used != how:
        raise RuntimeError(f"{how} kernels not available here (fused: {used})")
    return bench.model


def agreement_rows(bench, prompts, prefix: int) -> list[str]:
    """One line per lever: max |dp| of its next-token distribution against the plain eager
    pass on ``prompts`` (one at a time), within 1e-2 in bf16 (1e-5 in fp32) or not."""
    torch, model, dev = bench.torch, bench.model, bench.args.device
    fuse, tol = bench.calimon.fuse, 1e-5 if bench.args.dtype == "float32" else 1e-2

    def plain(how):
        if fuse(model, how) != how:
            raise RuntimeError(f"{how} kernels not available here")
        with torch.inference_mode():
            return torch.stack([torch.log_softmax(model(
                input_ids=torch.tensor([p], device=dev), logits_to_keep=1).logits[0, -1]
                .float(), -1).cpu() for p in prompts])

    ref, lines = plain("none"), []
    for path in (*PLAIN_LEVERS[1:], *CALIMON_LEVERS, "calimon"):
        try:
            got = plain(PLAIN_KERNELS[path]) if path in PLAIN_KERNELS else _calimon(
                bench, path, prompts, prefix)
            dp = float((got.exp() - ref.exp()).abs().max())
            lines.append(f"{path}: max |dp| {dp:.2e} ({'within' if dp <= tol else 'NOT within'}"
                         f" {tol:g})")
        except Exception as exc:  # noqa: BLE001 - a lever missing here is a line, not a stop
            lines.append(f"{path}: not measured ({type(exc).__name__}: {exc})"[:200])
    fuse(model, "none")
    return lines


def _calimon(bench, path: str, prompts, prefix: int):
    from gpu_plan import CALIMON_PATHS

    parts, n = bench.calimon, len(prompts)
    opts = CALIMON_PATHS[path]
    backend = parts.Backend.from_loaded(
        parts.model_ref(bench.args), bench.model, _Pad(), max_batch_size=n,
        batch_tokens=n * max(map(len, prompts)), **opts)
    got = bench.torch.as_tensor(backend.next_token_logprobs(prompts, prefix_len=prefix))
    if opts.get("kernels", "auto") not in ("auto", backend.kernels_used):
        raise RuntimeError(f"{opts['kernels']} kernels not available here")
    return got


def writer(bench, text):
    """A function that (re)writes --out with ``text()``, the report so far."""
    bench.args.out.parent.mkdir(parents=True, exist_ok=True)
    return lambda: bench.args.out.write_text(text(), encoding="utf-8")


def agreement_paragraph(bench) -> str:
    """The suite's agreement paragraph (`agreement_rows` on up to 8 real-length prompts)."""
    args = bench.args
    if bench.calimon is None:
        return f"Agreement: not measured (calimon not importable: {bench.calimon_error})."
    n = min(8, max(args.real_samples))
    prompts = bench.prompts(real_lengths(n, args.real_unit, args.seed, args.prefix_tokens))
    start = time.perf_counter()
    lines = agreement_rows(bench, prompts, args.prefix_tokens)
    text = (f"Agreement with the plain eager pass ({n} real-length prompts, one at a time; "
            f"{time.perf_counter() - start:.0f} s, compilations included): " + "; ".join(lines)
            + ".")
    print(text, file=sys.stderr, flush=True)
    return text


class _Pad:
    pad_token_id = 0
