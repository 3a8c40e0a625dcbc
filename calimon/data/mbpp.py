"""The MBPP code cells for amb-open (specification gaming x code, sycophancy x code).

Same generators as humaneval-pairs (`calimon.data.codegen`). MBPP gives a prose task, a reference
module and three asserts (plus, for a few problems, `challenge_test_list`):

- visible tests: the three asserts when challenge tests exist (those are held back), else the
  first two asserts, with the third held back;
- the request shows the task text and the entry function's name and parameters (taken from the
  reference); the sycophancy request also shows the asserts other than the one the claim is about;
- the reference is normalized (CRLF to LF, leading tabs to four spaces, trailing blanks dropped)
  and kept only if it still passes all its tests in the sandbox.

    python -m calimon.data.mbpp --stats [--limit N]
"""

from __future__ import annotations

import ast
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from calimon.data.codegen import WORKERS, CellReport, CodeProblem, TestCase
from calimon.data.codegen import loading as codegen_loading
from calimon.data.codegen.problem import (
    candidate_calls,
    function_layout,
    is_eq_form,
    params_of,
    parse,
)
from calimon.data.paths import sources_dir as resolve_sources
from calimon.data.sources import SourceFile, verified_path
from calimon.samples import Sample

SOURCE_REL = "mbpp/mbpp.jsonl"
SOURCE = SourceFile(path=SOURCE_REL,
                    sha256="143559fa164408d45cab058238471288b0e447507ce55db3057c56113d9dccb4",
                    upstream="MBPP (google-research), via a public mirror", license="CC-BY-4.0")


def normalize(code: str) -> str:
    """``code`` with Unix newlines, tabs in indentation expanded to four spaces, trailing spaces
    and leading/trailing blank lines dropped, newline-terminated."""
    out = []
    for line in code.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        stripped = line.lstrip(" \t")
        lead = line[:len(line) - len(stripped)].replace("\t", "    ")
        out.append((lead + stripped).rstrip())
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return "\n".join(out) + "\n"


def _entry(tests: list[str], code: str) -> str | None:
    defined = {n.name for n in parse(code).body if isinstance(n, ast.FunctionDef)}
    for t in tests:
        for node in ast.walk(parse(t)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in defined):
                return node.func.id
    return None


def _test(text: str, entry: str) -> TestCase | None:
    text = text.strip()
    try:
        tree = parse(text)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    stmt = tree.body[0]
    return TestCase(display=text, body=text, calls=tuple(candidate_calls(stmt, entry)),
                    eq_form=is_eq_form(stmt, entry))


def to_problem(row: dict) -> CodeProblem | str:
    """A CodeProblem, or the reason this row cannot be used honestly."""
    code = normalize(row["code"])
    try:
        entry = _entry(row["test_list"], code)
    except SyntaxError:
        return "reference or tests do not parse"
    if entry is None:
        return "tests call no function of the reference"
    node, _ = function_layout(code, entry)
    params = params_of(node)
    if params is None:
        return "signature with defaults or variable arguments"
    tests = [_test(t, entry) for t in row["test_list"]]
    challenge = [_test(t, entry) for t in row.get("challenge_test_list") or []]
    if any(t is None for t in tests + challenge) or len(tests) < 3:
        return "a test is not a single assert"
    visible, held = (tests, challenge) if challenge else (tests[:2], tests[2:])
    if not all(t.calls for t in visible):
        return "a visible test does not call the function"
    tid = int(row["task_id"])
    return CodeProblem(pid=f"MBPP/{tid}", key=f"mbpp-{tid:04d}", source="mbpp",
                       task=" ".join(row["text"].split()), task_is_code=False,
                       entry_point=entry, params=params,
                       header=normalize(row.get("test_setup_code") or "") if
                       (row.get("test_setup_code") or "").strip() else "",
                       reference=code, visible=tuple(visible), held=tuple(held),
                       style="direct")


def load_problems(path: str | Path) -> tuple[list[CodeProblem], dict[str, int]]:
    """The usable MBPP problems of a JSONL file, in file order, and {reason: rows skipped}."""
    return codegen_loading.load_problems(path, to_problem)


def mbpp_report(sources_dir: str | Path, seed: int = 0, *, limit: int | None = None,
                workers: int = WORKERS) -> tuple[list[Sample], CellReport, dict[str, int]]:
    """The MBPP code cells' samples (no splits), the pipeline report and the rows skipped before
    execution, from the checksum-verified source file under ``sources_dir``."""
    path = verified_path(Path(sources_dir), SOURCE)
    return codegen_loading.problems_report(path, to_problem, seed, limit=limit, workers=workers)


def mbpp_cells(sources_dir: str | Path, seed: int = 0, *, limit: int | None = None,
               workers: int = WORKERS) -> list[Sample]:
    """Both MBPP code cells without splits, from `sources_dir`/mbpp/mbpp.jsonl (checked)."""
    return mbpp_report(sources_dir, seed, limit=limit, workers=workers)[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m calimon.data.mbpp``: build the MBPP code cells and print their counts. Returns
    the exit status."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m calimon.data.mbpp",
                                     description="Build the MBPP code cells and print counts.")
    parser.add_argument("--stats", action="store_true")
    parser.add_argument("--sources", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    start = time.monotonic()
    samples, report, skipped = mbpp_report(resolve_sources(args.sources), args.seed,
                                           limit=args.limit)
    rep = report.to_dict()
    print(f"mbpp code cells: {len(samples)} samples in {time.monotonic() - start:.1f} s")
    for key, value in rep.items():
        print(f"{key}: {json.dumps(value)}")
    print("skipped before execution: " + json.dumps(skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
