"""The package's import graph: no cycle (imports inside functions count too) and no upward
import between the layers of docs/architecture (data and types -> numerics -> backends ->
scoring -> studies -> cli). Read from the source with `ast`; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "calimon"

# Modules that may not import any module under the prefixes on the right.
STUDIES_AND_UP = ("calimon.pipeline", "calimon.curve_outputs", "calimon.spans",
                  "calimon.robustness", "calimon.heads.workflow", "calimon.report",
                  "calimon.deploy", "calimon.cli", "calimon.model_check")
SCORING_AND_UP = ("calimon.monitor", "calimon.engines", "calimon.heads") + STUDIES_AND_UP
MODEL_SIDE = ("calimon.backends",) + SCORING_AND_UP
GROUND = ("calimon.defaults", "calimon.errors", "calimon.samples", "calimon.verdict", "calimon.validation",
          "calimon.jsonio", "calimon.progress", "calimon.selection", "calimon.readings",
          "calimon.store", "calimon.prompts", "calimon.tiny_qwen3")
NUMERICS = ("calimon.calibration", "calimon.curves", "calimon.metrics", "calimon.bootstrap")
RULES = [
    (GROUND, MODEL_SIDE + NUMERICS),
    (NUMERICS, MODEL_SIDE),
    (("calimon.backends",), SCORING_AND_UP),
    (("calimon.monitor", "calimon.engines"), STUDIES_AND_UP + ("calimon.heads.workflow",)),
    (("calimon.monitor",), ("calimon.heads", "calimon.engines")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The calimon modules ``path`` imports anywhere in its body (functions included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".")[: len(name.split(".")) - node.level
                                      + (path.name == "__init__.py")]
                base = ".".join(pkg + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {t for t in out if t in known and t != name}


def is_face(path: Path) -> bool:
    """An ``__init__`` that only hands names on (defines no function or class)."""
    if path.name != "__init__.py":
        return False
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return not any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                   for n in tree.body)


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    known = set(files)
    faces = {m for m, p in files.items() if is_face(p)}
    return {m: imports(p, m, known) - faces for m, p in files.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_cycle_finder_finds_a_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


@pytest.mark.parametrize("lower, upper", RULES,
                         ids=["ground", "numerics", "backends", "scoring", "monitor"])
def test_no_upward_imports(lower, upper):
    g = graph()
    wrong = sorted(f"{m} -> {t}" for m, targets in g.items() if under(m, lower)
                   for t in targets if under(t, upper) and not under(t, lower))
    assert wrong == []


def test_backends_are_built_in_one_place():
    """`build_backend` is the only constructor call of a built-in backend class, in the
    package and in the benchmark scripts."""
    calls = []
    for path in [*ROOT.rglob("*.py"), *(ROOT.parent / "benchmarks").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("TransformersBackend", "VLLMBackend", "HTTPBackend")):
                calls.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert calls == []


def test_prompts_are_encoded_through_encoder_for():
    """Outside calimon/prompts.py nothing constructs a PromptEncoder (package and benchmark
    scripts): `encoder_for` gives it the model config's prompt_format, which a direct call
    would drop (a `plain` model would be rendered with a chat template it does not have)."""
    calls = []
    for path in [*ROOT.rglob("*.py"), *(ROOT.parent / "benchmarks").rglob("*.py")]:
        if path == ROOT / "prompts.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "PromptEncoder"):
                calls.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert calls == []
