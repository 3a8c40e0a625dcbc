"""A coding problem as the code-cell generators see it, and the parsing helpers that get there.

A problem holds a task text, the reference solution as a complete module (imports, helpers, the
entry function) and its tests split into *visible* tests (shown in the request, run by the proxy
grader) and *held-back* tests (never shown; used to show that a test-gaming solution is wrong).
"""

from __future__ import annotations

import ast
import textwrap
import threading
import warnings
from dataclasses import dataclass

# CPython 3.11 counts the AST constructor's recursion depth in state shared by every thread: a
# thread that switches out mid-parse (a garbage collection running Python code, a warning) lets
# another thread's parse corrupt it ("SystemError: AST constructor recursion depth mismatch").
# The builds parse problems on a thread pool, so every parse to Python AST objects goes through
# this lock.
AST_LOCK = threading.Lock()


def parse(code: str, mode: str = "exec") -> ast.AST:
    """ast.parse (one thread at a time: `AST_LOCK`) without the invalid-escape warnings old
    sources (MBPP regexes) trigger."""
    with AST_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
        return ast.parse(code, mode=mode)


@dataclass(frozen=True)
class TestCase:
    """One test: statements to run inside ``def _t(candidate): ...``.

    ``display`` is the text shown to a user (an ``assert`` line); ``body`` is what runs (it may
    start with setup statements that preceded the assert in the original check function).
    ``calls`` are source texts of the argument tuples of direct calls of the candidate, e.g.
    ``"([1, 2], 3,)"``; ``eq_form`` is True for ``assert candidate(...) == <expr>``."""

    display: str
    body: str
    setup: str = ""  # setup statements preceding the test in the original check function
    calls: tuple[str, ...] = ()
    eq_form: bool = False
    simple: bool = True


@dataclass(frozen=True)
class CodeProblem:
    """A coding task with a trusted reference solution and split tests."""

    pid: str  # the upstream id, e.g. "HumanEval/0" or "MBPP/11"
    key: str  # short id used in pair ids, e.g. "he-000", "mbpp-0011"
    source: str  # "humaneval" | "mbpp"
    task: str  # the task as shown to the user
    task_is_code: bool  # True: a code stub (shown in a code block); False: prose
    entry_point: str
    params: tuple[str, ...]
    header: str  # executed before any solution (HumanEval stub and helpers, MBPP setup code)
    reference: str  # complete reference solution module
    visible: tuple[TestCase, ...]
    held: tuple[TestCase, ...]
    style: str  # "check": tests call `candidate`; "direct": tests call the entry by name

    @property
    def tests(self) -> tuple[TestCase, ...]:
        """Visible tests, then held-back ones."""
        return self.visible + self.held

    def visible_block(self) -> str:
        """The visible tests exactly as the proxy grader appends them to a submission."""
        if self.style == "check":
            lines = ["def check(candidate):"]
            if self.visible[-1].setup:
                lines.append(textwrap.indent(self.visible[-1].setup, "    "))
            lines += [textwrap.indent(t.display, "    ") for t in self.visible]
            return "\n".join(lines) + f"\n\n\ncheck({self.entry_point})\n"
        return "\n".join(t.display for t in self.visible) + "\n"

    def test_function(self, i: int, name: str) -> str:
        """Source of ``def <name>(candidate)`` running test i (visible first, then held-back)."""
        t = self.tests[i]
        rebind = f"{self.entry_point} = candidate\n" if self.style == "direct" else ""
        return f"def {name}(candidate):\n" + textwrap.indent(rebind + t.body, "    ") + "\n"


def _segment(lines: list[str], node: ast.stmt) -> str:
    return textwrap.dedent("\n".join(lines[node.lineno - 1:node.end_lineno]))


def candidate_calls(node: ast.AST, name: str) -> list[str]:
    """Argument-tuple sources of plain calls ``name(a, b)`` inside node (no keywords/stars)."""
    out = []
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == name
                and not sub.keywords and not any(isinstance(a, ast.Starred) for a in sub.args)):
            out.append("(" + "".join(ast.unparse(a) + ", " for a in sub.args) + ")")
    return out


def is_eq_form(node: ast.stmt, name: str) -> bool:
    """True when ``node`` is ``assert <call of name> == <value>`` (either side)."""
    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)):
        return False
    cmp = node.test
    if len(cmp.ops) != 1 or not isinstance(cmp.ops[0], ast.Eq):
        return False
    return any(isinstance(side, ast.Call) and isinstance(side.func, ast.Name)
               and side.func.id == name for side in (cmp.left, cmp.comparators[0]))


def split_check(test_src: str, *, n_visible: int | None = None
                ) -> tuple[tuple[TestCase, ...], tuple[TestCase, ...], str]:
    """Split a HumanEval-style ``def check(candidate): ...`` into visible and held-back tests.

    Returns (visible, held, reason). Statements that assert nothing about the candidate are setup (kept
    in front of every later test) or dropped when they are no-op asserts. The visible tests are
    the first 3 tests when there are at least 6, else the first 2; they must be plain asserts.
    When that cannot be done honestly, both are empty and reason says why."""
    lines = test_src.splitlines()
    try:
        module = parse(test_src)
    except SyntaxError:
        return (), (), "test code does not parse"
    checks = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        return (), (), "no single check(candidate) function"
    tests: list[TestCase] = []
    setup: list[str] = []
    for stmt in checks[0].body:
        uses = any(isinstance(n, ast.Name) and n.id == "candidate" for n in ast.walk(stmt))
        asserts = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
        text = _segment(lines, stmt)
        if uses and asserts:
            simple = isinstance(stmt, ast.Assert)
            tests.append(TestCase(display=text, body="\n".join([*setup, text]),
                                  setup="\n".join(setup),
                                  calls=tuple(candidate_calls(stmt, "candidate")),
                                  eq_form=is_eq_form(stmt, "candidate"), simple=simple))
        elif uses:
            return (), (), "check() uses the candidate outside an assert"
        elif isinstance(stmt, ast.Assert):
            continue  # e.g. `assert True, "..."`: tests nothing
        else:
            setup.append(text)
    k = n_visible if n_visible is not None else (3 if len(tests) >= 6 else 2)
    if len(tests) <= k:
        return (), (), f"fewer than {k + 1} tests"
    if not all(t.simple and t.calls for t in tests[:k]):
        return (), (), "a leading test is not a plain assert on a candidate call"
    return tuple(tests[:k]), tuple(tests[k:]), ""


def function_layout(code: str, entry: str) -> tuple[ast.FunctionDef, list[str]]:
    """The entry FunctionDef node of a module and the module's lines (raises if absent)."""
    module = parse(code)
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            return node, code.splitlines()
    raise ValueError(f"no top-level function {entry!r}")


def params_of(node: ast.FunctionDef) -> tuple[str, ...] | None:
    """Positional parameter names, or None when the signature has *args, **kwargs, defaults."""
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
        return None
    return tuple(x.arg for x in a.args)
