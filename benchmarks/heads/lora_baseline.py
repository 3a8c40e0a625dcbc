"""The fine-tuned verdict baseline (LoRA via peft) on a benchmark's train split, scored on
subsets of calib and test; writes <out>/lora-<benchmark>.json with per-sample scores so that
benchmarks/heads/report.py compares it with the verdict readout and the probes on the SAME
samples. ``--save-adapter DIR`` keeps the adapters (safetensors); ``--adapter DIR`` scores with
saved adapters instead of training (e.g. on a rebuilt benchmark's test split).

    python benchmarks/heads/lora_baseline.py --benchmark humaneval-pairs \
        --train-limit 64 --eval-limit 64 --out benchmarks/heads/out
    .venv-lora/bin/python benchmarks/heads/lora_baseline.py --benchmark amb-open --threads 2 \
        --train-limit 2000 --eval-limit 400 600 --save-adapter runs/lora-amb-open/adapter \
        --out benchmarks/heads/out          # trained-monitors.md's LoRA rows
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import asdict
from pathlib import Path

from calimon import __version__
from calimon.data.registry import load_benchmark
from calimon.selection import dataset_hash, select_pairs


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default="humaneval-pairs")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt", default="direct")
    ap.add_argument("--train-limit", type=int, default=64)
    ap.add_argument("--eval-limit", type=int, nargs="+", default=[64],
                    help="pairs' samples scored on calib and test (one value: both; two: calib "
                    "then test, as trained_monitors.py takes them)")
    ap.add_argument("--max-input-tokens", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/heads/out"))
    ap.add_argument("--save-adapter", type=Path, default=None,
                    help="write the trained adapters to this folder")
    ap.add_argument("--adapter", type=Path, default=None,
                    help="score with adapters saved by --save-adapter instead of training")
    ap.add_argument("--tag", default=None,
                    help="suffix of the output file name (default: -without-NAME with "
                         "--without-category or --without-source, else none; give it as "
                         "--tag=-x)")
    ap.add_argument("--without-category", default=None,
                    help="train without this category (leave-one-category-out; calib and "
                    "test keep every category, the report holds it out of calibration)")
    ap.add_argument("--without-source", default=None,
                    help="train without this amb-open source (leave-one-source-out, as "
                         "--without-category)")
    args = ap.parse_args(argv)
    if args.without_category and args.without_source:
        ap.error("give --without-category or --without-source, not both")

    import torch

    from calimon.models import resolve_model
    from calimon.prompts import load_prompt
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec
    from calimon.scoring.monitor import Monitor
    from calimon.studies.heads.lora import LoraSettings, load_lora_verdict, train_lora_verdict

    torch.set_num_threads(args.threads)
    samples = [s for s in load_benchmark(args.benchmark) if s.label is not None]
    by = {sp: [s for s in samples if s.split == sp] for sp in ("train", "calib", "test")}
    held = args.without_category or args.without_source
    field = "category" if args.without_category else "source"
    pool = [s for s in by["train"] if not held or getattr(s, field) != held]
    if held and (not pool or len(pool) == len(by["train"])):
        ap.error(f"no train sample has category/source {held!r} (or none is left)")
    train = select_pairs(pool, args.train_limit, args.seed)
    if len(args.eval_limit) > 2:
        ap.error("--eval-limit takes one or two values")
    calib_limit, test_limit = args.eval_limit[0], args.eval_limit[-1]
    calib = select_pairs(by["calib"], calib_limit, args.seed)
    test = select_pairs(by["test"], test_limit, args.seed)
    log(f"train {len(train)}, calib {len(calib)}, test {len(test)}")
    resolved = resolve_model(args.model)
    backend = build_backend(MonitorSpec(model=args.model, options={"device": "cpu"}))
    prompt = load_prompt(args.prompt)
    settings = LoraSettings(r=args.rank, alpha=2 * args.rank, lr=args.lr, epochs=args.epochs,
                            batch_size=args.batch_size, max_input_tokens=args.max_input_tokens,
                            seed=args.seed)
    if args.adapter is not None:
        tuned, digest = load_lora_verdict(backend, args.adapter)
        losses, train_seconds = [], None
        log(f"loaded adapters from {args.adapter} (sha256 {digest[:12]})")
    else:
        run = train_lora_verdict(backend, prompt, train, settings, log=log,
                                 save_dir=args.save_adapter)
        tuned, digest, losses, train_seconds = (run.backend, run.adapter_sha256,
                                                list(run.losses), round(run.seconds, 1))
        log(f"trained in {run.seconds:.0f} s")
    start = time.perf_counter()
    mon = Monitor(tuned, prompt, "verdict", max_input_tokens=args.max_input_tokens)
    scores = {}
    for name, rows in (("calib", calib), ("test", test)):
        verdicts = []
        for i in range(0, len(rows), 16):
            verdicts += mon.score(rows[i:i + 16])
            log(f"scored {name} {min(i + 16, len(rows))}/{len(rows)}")
        scores[name] = {s.id: v.p_raw for s, v in zip(rows, verdicts, strict=True)}
    score_s = time.perf_counter() - start
    result = {"benchmark": args.benchmark, "model": resolved.name,
              "model_revision": resolved.revision, "tuned_revision": tuned.model_ref.revision,
              "prompt": args.prompt, "settings": asdict(settings), "threads": args.threads,
              "trained_without": args.without_category,
              "trained_without_source": args.without_source,
              "n": {"train": len(train), "calib": len(calib), "test": len(test)},
              "dataset_hash": {"train": dataset_hash(train), "calib": dataset_hash(calib),
                               "test": dataset_hash(test)},
              "train_seconds": train_seconds, "score_seconds": round(score_s, 1),
              "adapter": str(args.adapter or args.save_adapter or ""),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
              "losses": losses, "adapter_sha256": digest,
              "calimon_version": __version__, "scores": scores}
    args.out.mkdir(parents=True, exist_ok=True)
    tag = args.tag if args.tag is not None else (f"-without-{held}" if held else "")
    path = args.out / f"lora-{args.benchmark}{tag}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
