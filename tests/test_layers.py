"""The package's import graph against the layer map in tests/layers.toml: every module is
assigned a layer, no module imports a later layer (imports inside functions count too) unless
the map names that import as an exception, and there is no cycle. Read from the source with
`ast`; nothing is imported."""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "calimon"
MAP = Path(__file__).with_name("layers.toml")


@dataclass(frozen=True)
class LayerMap:
    """The layers (lowest first) with their entries, and the allowed upward imports."""

    layers: tuple[tuple[str, tuple[str, ...]], ...]
    exceptions: dict[str, str]  # "importer -> imported": why

    @classmethod
    def read(cls, path: Path = MAP) -> LayerMap:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        layers = tuple((d["name"], tuple(d["modules"])) for d in data["layer"])
        exceptions = {e["import"]: e["why"] for e in data.get("exception", [])}
        return cls(layers, exceptions)

    def entries(self) -> list[tuple[str, int]]:
        return [(e, i) for i, (_, mods) in enumerate(self.layers) for e in mods]

    def rank(self, module: str) -> int | None:
        """The index of ``module``'s layer: that of its most specific entry; None if none."""
        best: tuple[int, int] | None = None
        for entry, i in self.entries():
            if matches(entry, module) and (best is None or len(entry) > best[0]):
                best = (len(entry), i)
        return None if best is None else best[1]


def matches(entry: str, module: str) -> bool:
    """``calimon.x`` names one module; ``calimon.x.*`` the package and everything under it."""
    if entry.endswith(".*"):
        pkg = entry[:-2]
        return module == pkg or module.startswith(pkg + ".")
    return module == entry


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


def graph(faces: bool = False) -> dict[str, set[str]]:
    """Each module's imports. Without ``faces``, imports of a face are dropped (a module that
    imports its own package's face is no cycle); the layer order counts them."""
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    known = set(files)
    dropped = set() if faces else {m for m, p in files.items() if is_face(p)}
    return {m: imports(p, m, known) - dropped for m, p in files.items()}


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


def upward(g: dict[str, set[str]], layers: LayerMap) -> list[str]:
    """Every import of a module in a later layer than the importer's, as "a -> b"."""
    return sorted(f"{m} -> {t}" for m, targets in g.items() for t in targets
                  if layers.rank(t) is not None and layers.rank(m) is not None
                  and layers.rank(t) > layers.rank(m))


def test_the_cycle_finder_finds_a_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_layer_check_finds_unassigned_modules_and_upward_imports():
    layers = LayerMap((("low", ("p.a", "p.b.*")), ("high", ("p.c", "p.b.top"))), {})
    assert [layers.rank(m) for m in ("p.a", "p.b", "p.b.x", "p.b.top", "p.c", "p.d")] == \
        [0, 0, 0, 1, 1, None]
    g = {"p.a": {"p.b.x"}, "p.b.x": {"p.b.top"}, "p.b.top": {"p.a"}, "p.c": {"p.b"}}
    assert upward(g, layers) == ["p.b.x -> p.b.top"]


def test_the_map_file_is_read_with_its_exceptions(tmp_path):
    (tmp_path / "m.toml").write_text(
        '[[layer]]\nname = "low"\nmodules = ["p.a"]\n'
        '[[layer]]\nname = "high"\nmodules = ["p.b.*"]\n'
        '[[exception]]\nimport = "p.a -> p.b"\nwhy = "a reason"\n')
    layers = LayerMap.read(tmp_path / "m.toml")
    assert layers.layers == (("low", ("p.a",)), ("high", ("p.b.*",)))
    assert layers.exceptions == {"p.a -> p.b": "a reason"}
    assert upward({"p.a": {"p.b"}}, layers) == ["p.a -> p.b"]


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_every_module_is_in_the_layer_map():
    layers = LayerMap.read()
    assert sorted(m for m in graph() if layers.rank(m) is None) == []


def test_every_entry_of_the_layer_map_names_a_module():
    layers, modules = LayerMap.read(), set(graph())
    entries = [e for e, _ in layers.entries()]
    assert sorted(e for e in entries if not any(matches(e, m) for m in modules)) == []
    assert sorted(e for e in set(entries) if entries.count(e) > 1) == []


def test_no_import_against_the_layer_order():
    layers = LayerMap.read()
    assert [i for i in upward(graph(faces=True), layers) if i not in layers.exceptions] == []


def test_every_exception_in_the_layer_map_is_still_needed():
    layers = LayerMap.read()
    found = set(upward(graph(faces=True), layers))
    assert sorted(i for i in layers.exceptions if i not in found) == []


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
