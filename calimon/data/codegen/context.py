"""What the two pair builders of a problem share: the problem, its seeded RNG, the layout of the
reference, the calls found in its tests and the trusted batch run on them (reference, mutants,
constant bodies), and the helpers that choose those inputs.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass

from calimon.data.codegen import hacks as H
from calimon.data.codegen import negatives as N
from calimon.data.codegen.edit import Layout
from calimon.data.codegen.mutants import Mutant
from calimon.data.codegen.problem import CodeProblem, parse
from calimon.data.codegen.runner import BatchResult

MAX_VALUE_REPR = 60
MAX_CALL_REPR = 90


@dataclass
class ProblemContext:
    """One problem's shared state for the pair builders (module docstring); ``batch`` is the
    trusted run once made, ``runs`` counts sandbox processes."""

    problem: CodeProblem
    rng: random.Random
    lay: Layout
    calls: list[str]
    call_test: list[int]  # index of the test holding each call (-1 for edge calls)
    mutants: list[Mutant]
    constants: list[str]
    batch: BatchResult | None = None
    runs: int = 0

    def variant(self, i: int):
        """The trusted batch's result for variant ``i`` (0 is the reference)."""
        return self.batch.variants[i]


def usable(r) -> bool:
    """True when a variant loaded and did not hit the time limit."""
    return r.loaded and not r.hung


def expected_literals(problem: CodeProblem) -> list[str]:
    """The literal sides (source text, short ones only, deduplicated) of the problem's ``==``
    tests on the candidate: values a constant body could return."""
    out: list[str] = []
    name = "candidate" if problem.style == "check" else problem.entry_point
    for t in problem.tests:
        try:
            node = parse(t.display).body[0]
        except (SyntaxError, IndexError):
            continue
        if not t.eq_form:
            continue
        cmp = node.test
        for side in (cmp.left, cmp.comparators[0]):
            if not (isinstance(side, ast.Call) and isinstance(side.func, ast.Name)
                    and side.func.id == name):
                try:
                    value = ast.literal_eval(side)
                except (ValueError, SyntaxError, TypeError, RecursionError):
                    continue
                # a set's repr follows the builder's hash seed; its source text does not
                text = ast.unparse(side) if _holds_a_set(value) else repr(value)
                if len(text) <= MAX_VALUE_REPR and text not in out:
                    out.append(text)
    return out


def _holds_a_set(value) -> bool:
    if isinstance(value, set | frozenset):
        return True
    if isinstance(value, list | tuple):
        return any(_holds_a_set(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_a_set(v) for v in value.values())
    return False


_DEFAULTS = {bool: ("False", "True"), int: ("0", "1"), float: ("0.0",), str: ("''",),
             list: ("[]",), tuple: ("()",), dict: ("{}",), type(None): ("None",)}


def constants(problem: CodeProblem) -> list[str]:
    """Up to 8 constant return values to try as bodies: expected literals of the tests, defaults
    of their types, and None."""
    expected = expected_literals(problem)
    out = list(expected[:4])
    for text in expected:
        for d in _DEFAULTS.get(type(H.literal(text)), ()):
            if d not in out:
                out.append(d)
    if "None" not in out:
        out.append("None")
    return out[:8]


def probe_calls(problem: CodeProblem) -> tuple[list[str], list[int]]:
    """The argument tuples the trusted batch runs: every call of the candidate in the tests (in
    test order, with the index of its test), plus edge inputs for one-parameter functions (-1)."""
    calls, owner = [], []
    for ti, t in enumerate(problem.tests):
        for c in t.calls:
            if c not in calls:
                calls.append(c)
                owner.append(ti)
    if len(problem.params) == 1:
        for c in N.EDGE_CALLS:
            if c not in calls:
                calls.append(c)
                owner.append(-1)
    return calls, owner
