"""Render benchmarks/results/heads.md from the JSON files written by run_heads.py and
lora_baseline.py (no number in heads.md is typed by hand).

    python benchmarks/heads/report.py --results benchmarks/heads/out \
        --out benchmarks/results/heads.md
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from calimon.studies.heads.evaluate import evaluate_readout


def f(x, nd=3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{nd}f}"


def readout_table(readouts: dict) -> list[str]:
    lines = ["| readout | n test (misbehaving) | AUROC raw | AUROC after Platt | ECE raw | "
             "ECE after Platt | MR at FAR<=5% |", "|---|---|---|---|---|---|---|"]
    for name, r in readouts.items():
        unscored = f", {r['n_unscored']} unscored" if r["n_unscored"] else ""
        lines.append(f"| {name} | {r['n_test']} ({r['n_test_pos']}){unscored} | "
                     f"{f(r['auroc_raw'])} | {f(r['auroc_cal'])} | {f(r['ece_raw'])} | "
                     f"{f(r['ece_cal'])} | {f(r['mr_at_far'])} |")
    return lines


def lora_section(heads: dict, lora: dict) -> list[str]:
    labels = heads["labels"]
    ids = {sp: [i for i in lora["scores"][sp] if i in labels] for sp in ("calib", "test")}
    out = {}
    for name, per in heads["per_sample"].items():
        p = {sp: np.array([per[sp].get(i, np.nan) for i in ids[sp]]) for sp in ids}
        y = {sp: np.array([labels[i] for i in ids[sp]]) for sp in ids}
        out[name] = evaluate_readout(name, p["calib"], y["calib"], p["test"], y["test"]).to_dict()
    p = {sp: np.array([lora["scores"][sp][i] if lora["scores"][sp][i] is not None else np.nan
                       for i in ids[sp]]) for sp in ids}
    y = {sp: np.array([labels[i] for i in ids[sp]]) for sp in ids}
    name = (f"LoRA verdict (r={lora['settings']['r']}, {lora['n']['train']} train samples, "
            f"{lora['settings']['epochs']} epoch)")
    out[name] = evaluate_readout(name, p["calib"], y["calib"], p["test"], y["test"]).to_dict()
    lines = [f"Same {len(ids['calib'])} calib and {len(ids['test'])} test samples for every row "
             "(the subset the LoRA run scored; the probes were trained on the full train subset "
             f"above, the LoRA adapters on {lora['n']['train']} train samples).", ""]
    return lines + readout_table(out)


def sweep_table(sweep: dict) -> list[str]:
    cv, test = sweep["cv_auroc"], sweep["test_auroc"]
    pools = list(cv)
    lines = ["| layer | " + " | ".join(f"CV AUROC {p}" for p in pools) + " | " +
             " | ".join(f"test AUROC {p}" for p in pools) + " |",
             "|---|" + "---|" * (2 * len(pools))]
    for layer in sorted(cv[pools[0]], key=int):
        lines.append(f"| {layer} | " + " | ".join(f(cv[p][layer]) for p in pools) + " | " +
                     " | ".join(f(test[p].get(layer, test[p].get(str(layer)))) for p in pools)
                     + " |")
    return lines


def transfer_tables(tr: dict) -> list[str]:
    cells = tr["cells"]
    rows = list(dict.fromkeys(c["train"] for c in cells))
    cols = list(dict.fromkeys(c["test"] for c in cells))
    get = {(c["train"], c["test"]): c for c in cells}
    out = []
    for metric, label in (("auroc", "AUROC"), ("mr_at_far", "MR at FAR<=5%")):
        out += [f"{label} (rows: trained on; columns: tested on)", "",
                "| train \\ test | " + " | ".join(f"{c} (n={get[(rows[0], c)]['n_test']})"
                                                  for c in cols) + " |",
                "|---|" + "---|" * len(cols)]
        for r in rows:
            n = get[(r, cols[0])]["n_train"]
            out.append(f"| {r} (n={n}) | " + " | ".join(f(get[(r, c)][metric]) for c in cols)
                       + " |")
        out.append("")
    return out


def auroc_half_width(n_pos: int, n_neg: int) -> float:
    """95% half-width of an AUROC near 0.5 (Hanley-McNeil): the sampling error to expect."""
    return 1.96 * ((n_pos + n_neg + 1) / (12 * n_pos * n_neg)) ** 0.5


def reading(heads: dict, lora: dict | None) -> list[str]:
    """Caveats and the transfer question, computed from the JSON (no figure typed by hand)."""
    te = heads["counts"]["test"]
    hw = auroc_half_width(te["n_pos"], te["n"] - te["n_pos"])
    out = ["## Reading", "",
           f"- Sampling error: with {te['n']} test samples ({te['n_pos']} misbehaving) an AUROC "
           f"near 0.5 carries about +-{hw:.2f} (95%), more within one category; MR at FAR<=5% "
           "rests on the few benign samples above the threshold."]
    get = {(c["train"], c["test"]): c["auroc"] for c in heads["transfer"]["cells"]}
    if ("safety", "spec_gaming") in get and ("spec_gaming", "spec_gaming") in get:
        out.append(
            "- Transfer (the paper's question: does training on explicit misbehavior reach "
            "specification gaming?): a probe trained on safety only scores AUROC "
            f"{f(get[('safety', 'spec_gaming')])} on spec_gaming, one trained on spec_gaming "
            f"{f(get[('spec_gaming', 'spec_gaming')])}, one trained on all "
            f"{f(get[('all', 'spec_gaming')])}.")
    if lora:
        out.append("- The LoRA baseline is a plumbing-scale run (the sizes above), far from a "
                   "real fine-tune; its row says the code works end to end, not how well "
                   "fine-tuning does.")
    out.append("- The probes read the same forward pass as the verdict, so their cost on top "
               "of the verdict is only the head itself.")
    return out + [""]


def render(heads: dict, lora: dict | None, commands: list[str]) -> str:
    c = heads["counts"]
    L = ["# Probe heads on hidden states — results", "",
         "Generated by `benchmarks/heads/report.py` from the JSON written by the scripts below; "
         "do not edit by hand.", "", "## Commands", "", "```"] + commands + ["```", "",
         "## Setup", "",
         f"- model `{heads['model']}` (revision `{heads['model_revision']}`), prompt "
         f"`{heads['prompt']}` (verdict format, template hash `{heads['template_hash']}`), "
         f"transcripts truncated to {heads['max_input_tokens']} tokens (head_tail policy); "
         f"calimon {heads['calimon_version']}.",
         f"- benchmark `{heads['benchmark']}`; whole pairs drawn per split with "
         f"`select_pairs(seed={heads['seed']})` (limits {heads['limits']}):"]
    for sp in ("train", "calib", "test"):
        L.append(f"  - {sp}: {c[sp]['n']} samples, {c[sp]['n_pos']} misbehaving, "
                 f"{c[sp]['truncated']} truncated, by category {c[sp]['categories']}")
    L += [f"- one capture pass per sample ({heads['tokens_after_prefix']} prompt tokens in all; "
          "the shared prompt prefix ran once) gave pooled states of all layers, per-token states "
          f"at layers {heads['token_layers']} and the verdict P(Yes) of the same pass.",
          "- every head is fitted on the train split only; hyper-parameters by pair-grouped "
          "cross-validation on it; the calibration map (Platt) is fitted on calib and applied "
          "to test; MR at FAR<=5% is read off the calibrated test curve "
          "(the test-set threshold, as `calimon curve` reports it).", "",
          "## Verdict readout vs probe heads (test split)", ""]
    L += readout_table(heads["readouts"])
    th = heads["token_head"]
    sp = th["spans_test"]
    L += ["", "## Fine-tuned verdict baseline (LoRA)", ""]
    if lora:
        s = lora["settings"]
        L += [f"A documented small run: 2 CPU cores shared by several engineers do not fit a "
              f"full fine-tune in a benchmark run. LoRA r={s['r']}, alpha={s['alpha']}, "
              f"modules {s['target_modules']}, lr {s['lr']}, batch {s['batch_size']}, "
              f"{s['epochs']} epoch on {lora['n']['train']} train samples "
              f"({lora['n']['train'] // 2} pairs), max {s['max_input_tokens']} tokens, "
              f"{lora['threads']} thread: {lora['train_seconds']} s training, "
              f"{lora['score_seconds']} s scoring, peak RSS {lora['peak_rss_mb']} MB. Loss "
              "= class-balanced BCE of log P(yes forms) - log P(no forms) at the answer "
              "position.", ""]
        L += lora_section(heads, lora)
    else:
        L += ["Not run (no lora JSON found)."]
    L += ["", "## Layer sweep (train split, pair-grouped 5-fold CV; test AUROC for reference)",
          "",
          f"Logistic head, C={heads['sweep']['C']}, class-balanced, standardized features. "
          f"Best: layer {heads['sweep']['best']['layer']} ({heads['sweep']['best']['pooling']}"
          f", CV AUROC {f(heads['sweep']['best']['cv_auroc'])}); best with mean pooling: layer "
          f"{heads['sweep']['best_mean']['layer']} (CV AUROC "
          f"{f(heads['sweep']['best_mean']['cv_auroc'])}). Layer 0 = embeddings.", ""]
    L += sweep_table(heads["sweep"])
    L += ["", "## Token head", "",
          f"Per-token logistic probe at layer {th['layer']} (chosen among {heads['token_layers']}"
          f" by out-of-fold sequence AUROC), trained on {th['n_tokens']} response tokens "
          f"({th['n_positive_tokens']} inside gold spans); sequence score = {th['aggregate']} "
          f"of token probabilities; spans = runs above {th['span_threshold']} (threshold with "
          "the best out-of-fold char F1 on train).", "",
          "| layer | " + " | ".join(f"CV AUROC {a}" for a in
                                    next(iter(th["cv_auroc_by_layer"].values()))) + " |",
          "|---|" + "---|" * len(next(iter(th["cv_auroc_by_layer"].values())))]
    for layer, d in th["cv_auroc_by_layer"].items():
        L.append(f"| {layer} | " + " | ".join(f(v) for v in d.values()) + " |")
    L += ["", "Spans on the misbehaving test samples with gold spans (character level):", "",
          "| predictor | rows | precision | recall | F1 | mean IoU | hit@1 |",
          "|---|---|---|---|---|---|---|"]
    for name, s in (("token head", sp["head"]), ("random lines (same count)",
                                                  sp["random_lines"])):
        L.append(f"| {name} | {s['n_scored']} | {f(s['precision'])} | {f(s['recall'])} | "
                 f"{f(s['f1'])} | {f(s['mean_iou'])} | {f(s['hit_at_1'])} |")
    tr = heads["transfer"]
    L += ["", "## Transfer matrix (sequence head, test split)", "",
          f"Logistic head at layer {tr['layer']} ({tr['pooling']}), C by pair-grouped CV on "
          "each training set. MR at FAR<=5% uses each test cell's own threshold. "
          "Within-category pair-grouped CV AUROC on train: "
          + ", ".join(f"{k} {f(v)}" for k, v in tr["within_cv"].items()) + ".", ""]
    L += transfer_tables(tr)
    L += ["## Training cost", "",
          "| head | seconds | peak traced memory (MB) |", "|---|---|---|"]
    for name, cst in heads["training_cost"].items():
        L.append(f"| {name} | {cst['seconds']} | {cst['peak_traced_mb']} |")
    L.append(f"| layer sweep ({len(heads['sweep']['cv_auroc'])} poolings x all layers x "
             f"{heads['sweep']['folds']} folds) | {heads['sweep']['cost']['seconds']} | "
             f"{heads['sweep']['cost']['peak_traced_mb']} |")
    L += ["", "Seconds are wall-clock on this machine's 2 CPU cores (other jobs may have shared "
          "them): compare them with each other, not with other machines. "
          "Peak traced memory is what Python and numpy allocated during the fit (tracemalloc);"
          f" the whole benchmark process peaked at {heads['peak_rss_mb']} MB RSS (model "
          "included). Feature extraction (one capture pass per sample, "
          f"{heads['extract_seconds_this_run']} s in this run) is the dominant cost; the heads "
          "train from the cached features. tracemalloc slows the MLP's torch loop.", ""]
    L += reading(heads, lora)
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("benchmarks/heads/out"))
    ap.add_argument("--benchmark", default="humaneval-pairs")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/heads.md"))
    ap.add_argument("--command", action="append", default=[],
                    help="a command line that produced the JSON files (repeatable)")
    args = ap.parse_args(argv)
    heads = json.loads((args.results / f"heads-{args.benchmark}.json").read_text())
    lora_path = args.results / f"lora-{args.benchmark}.json"
    lora = json.loads(lora_path.read_text()) if lora_path.is_file() else None
    cmds = args.command + [f"python benchmarks/heads/report.py --results {args.results} "
                           f"--benchmark {args.benchmark} --out {args.out}"]
    args.out.write_text(render(heads, lora, cmds))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
