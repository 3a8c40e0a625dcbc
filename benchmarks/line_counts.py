"""Lines per package of calimon/ and its largest functions at one or more git revisions.

    python3 benchmarks/line_counts.py b62008c HEAD

Reads each module with `git show REV:PATH` and `ast` (nothing is imported). Modules at the root of
calimon/ count as "(root modules)", the old calimon/cli_*.py modules as "cli".
"""

from __future__ import annotations

import ast
import collections
import subprocess
import sys


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def counts(rev: str) -> tuple[dict[str, int], list[tuple[int, str]]]:
    """Lines per package and (length, module:function) of every function at ``rev``."""
    per_package: collections.Counter = collections.Counter()
    functions = []
    for path in _git("ls-tree", "-r", "--name-only", rev, "calimon").split():
        if not path.endswith(".py"):
            continue
        src = _git("show", f"{rev}:{path}")
        parts = path.split("/")
        key = parts[1] if len(parts) > 2 else ("cli" if parts[1].startswith("cli") else
                                               "(root modules)")
        per_package[key] += src.count("\n")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.append((node.end_lineno - node.lineno + 1,
                                  f"{path.removeprefix('calimon/')}:{node.name}"))
    return dict(sorted(per_package.items())), sorted(functions, reverse=True)


def main(revs: list[str]) -> None:
    for rev in revs:
        packages, functions = counts(rev)
        print(f"{rev}: total {sum(packages.values())} lines")
        print("  " + ", ".join(f"{k} {v}" for k, v in packages.items()))
        print("  largest functions: " + ", ".join(f"{name} {n}" for n, name in functions[:5]))


if __name__ == "__main__":
    main(sys.argv[1:] or ["HEAD"])
