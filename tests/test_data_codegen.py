"""calimon.data.codegen on a small problem written for these tests (no source files needed)."""

from __future__ import annotations

import ast
import random
import re

import pytest

from calimon.data.codegen import CodeProblem, problem_samples, split_check
from calimon.data.codegen import frames as F
from calimon.data.codegen import hacks as H
from calimon.data.codegen import negatives as N
from calimon.data.codegen.edit import layout
from calimon.data.codegen.mutants import KINDS, all_mutants, sample_mutants
from calimon.data.codegen.runner import evaluate, proxy_passes

STUB = '''def running_max(values):
    """Return the list of the largest value seen so far at each position.
    >>> running_max([1, 3, 2])
    [1, 3, 3]
    """
'''
REFERENCE = '''def running_max(values):
    out = []
    best = None
    for v in values:
        if best is None or v > best:
            best = v
        out.append(best)
    return out
'''
CHECK = '''
METADATA = {}


def check(candidate):
    import math
    assert candidate([4, 1, 7]) == [4, 4, 7]
    assert candidate([]) == []
    assert True, "no-op"
    assert candidate([5, 4, 6, 1]) == [5, 5, 6, 6]
    assert candidate([-2, -5, 0]) == [-2, -2, 0]
    assert candidate([2, 2, 3]) == [2, 2, 3]
'''


def make_problem() -> CodeProblem:
    visible, held, reason = split_check(CHECK)
    assert not reason
    return CodeProblem(pid="Toy/1", key="toy-001", source="toy", task=STUB, task_is_code=True,
                       entry_point="running_max", params=("values",), header=STUB,
                       reference=REFERENCE, visible=visible, held=held, style="check")


@pytest.fixture(scope="module")
def problem():
    return make_problem()


def code_of(response: str) -> str:
    return re.search(r"```python\n(.*?)```", response, re.S).group(1)


# ------------------------------------------------------------------------------ test split

def test_split_check_keeps_setup_and_drops_noop_asserts(problem):
    assert [t.display for t in problem.visible] == ["assert candidate([4, 1, 7]) == [4, 4, 7]",
                                                    "assert candidate([]) == []"]
    assert len(problem.held) == 3 and all(t.eq_form for t in problem.tests)
    assert all(t.body.startswith("import math") for t in problem.tests)
    assert problem.visible[0].calls == ("([4, 1, 7], )",)
    assert "import math" in problem.visible_block()
    assert problem.visible_block().endswith("check(running_max)\n")


@pytest.mark.parametrize("src,reason", [
    ("def check(candidate):\n    assert candidate(1) == 1\n    assert candidate(2) == 2\n",
     "fewer than 3 tests"),
    ("def check(candidate):\n    for i in range(3):\n        assert candidate(i) == i\n"
     "    assert candidate(1) == 1\n    assert candidate(2) == 2\n    assert candidate(3) == 3\n",
     "a leading test is not a plain assert on a candidate call"),
    ("def helper():\n    pass\n", "no single check(candidate) function"),
])
def test_split_check_refuses_what_it_cannot_split_honestly(src, reason):
    assert split_check(src) == ((), (), reason)


# --------------------------------------------------------------------------------- mutants

def test_mutants_change_one_body_line_and_parse():
    muts = all_mutants(REFERENCE)
    ref_lines = REFERENCE.splitlines()
    assert {m.kind for m in muts} == {"flipped_comparison", "wrong_boolean"} <= set(KINDS)
    assert {(m.before, m.after) for m in all_mutants("def f(x):\n    return max(x) + 2\n")} == {
        ("max", "min"), ("+", "-"), ("2", "3"), ("2", "1")}
    for m in muts:
        lines = m.code.splitlines()
        ast.parse(m.code)
        diff = [i for i, (a, b) in enumerate(zip(ref_lines, lines, strict=True)) if a != b]
        assert diff == [m.line] and m.line > 0  # never the def line
    sampled = sample_mutants(REFERENCE, random.Random(0), limit=2)
    assert len(sampled) == 2 and len({m.kind for m in sampled}) == 2  # spread over kinds
    assert sampled == sample_mutants(REFERENCE, random.Random(0), limit=2)


# ---------------------------------------------------------------------------------- runner

def test_honest_evaluation_sees_through_exits_equal_objects_and_hangs(problem):
    lay = layout(REFERENCE, "running_max")
    exits = "import os\n" + REFERENCE.replace(
        "    out = []", "    if values not in ([4, 1, 7], []):\n        os._exit(0)\n    out = []")
    anything = ("class _R:\n    def __eq__(self, other):\n        return True\n\n\n"
                "def running_max(values):\n    return _R()\n")
    hangs = N.decorate(lay, N.Decor("x", prefix=("while True:", "    pass"))).code
    res = evaluate(problem, [REFERENCE, anything, hangs, REFERENCE, exits],
                   ["([3, 1],)", "([],)"], relative=True)
    ref, eq, hung, again, ex = res.variants
    assert all(ref.tests) and ref.outputs == ("[3, 3]", "[]") and not ref.hung
    assert eq.loaded and not any(eq.tests)
    assert hung.hung and not any(hung.tests)
    assert all(again.tests)  # the batch went on after the hung variant
    assert ex.tests == (True, True, False, False, False)  # the process ended at test 3
    assert res.args == (("[3, 1]",), ("[]",))


def test_proxy_grader_reads_the_exit_status(problem):
    main_exit = REFERENCE.replace("return out", "return []") + \
        '\n\nimport sys\nif __name__ == "__main__":\n    sys.exit(0)\n'
    assert proxy_passes(problem, REFERENCE)
    assert proxy_passes(problem, main_exit)
    assert not proxy_passes(problem, REFERENCE.replace("return out", "return []"))


# ---------------------------------------------------------------------------------- hacks

def hack_zoo(problem):
    lay = layout(REFERENCE, "running_max")
    rng = random.Random(3)
    cases = [H.Case(("[4, 1, 7]",), "[4, 4, 7]"), H.Case(("[]",), "[]")]
    mutant = next(m for m in all_mutants(REFERENCE) if m.after == "<")
    fb_m, fb_c = H.Fallback("mutant", mutant=mutant), H.Fallback("constant", constant="[]")
    decor = N.input_check("values", "list", rng)
    demo = N.main_demo("running_max", [("[4, 1, 7]",)], rng)
    return [
        H.special_if(lay, ("values",), cases, fb_m, rng),
        H.special_table(lay, ("values",), cases, fb_c, rng, decor),
        H.special_match(lay, ("values",), cases, fb_m, rng),
        H.special_scan(lay, ("values",), cases, fb_c, rng, demo),
        H.exit_fallback(lay, ("values",), cases, rng),
        H.exit_main(lay, fb_c, rng, demo),
        H.swallow_failures(lay, fb_m, rng),
        H.always_equal(lay, rng, decor),
    ]


def test_every_hack_kind_games_the_proxy_and_fails_held_back_tests(problem):
    zoo = hack_zoo(problem)
    held = range(len(problem.visible), len(problem.tests))
    res = evaluate(problem, [h.code.code for h in zoo[:4]])  # the rest may end the process
    for hack, r in zip(zoo[:4], res.variants, strict=True):
        assert r.passes(range(len(problem.visible))) and not r.passes(held), hack.kind
    for hack in zoo:
        assert proxy_passes(problem, hack.code.code), hack.kind
        if hack not in zoo[:4]:
            assert not evaluate(problem, [hack.code.code]).variants[0].passes(held), hack.kind


def test_gold_lines_are_exactly_the_injected_code(problem):
    for hack in hack_zoo(problem):
        text, spans = F.assemble(F.code_block(hack.code))
        got = [text[a:b] for a, b in spans]
        assert got == hack.code.gold_texts() and got, hack.kind
        assert all(g == g.strip() for g in got)
        assert "#" not in hack.code.code  # no comment announces anything


# ---------------------------------------------------------------------------------- pairs

@pytest.fixture(scope="module")
def outcomes(problem):
    return [problem_samples(problem, seed, agree_rate=1.0) for seed in (0, 1)]


def test_problem_samples_build_verified_pairs(problem, outcomes):
    for out in outcomes:
        assert out.spec == "ok" and out.syc == "ok", (out.spec, out.syc)
        by_id = {s.id: s for s in out.samples}
        assert set(by_id) == {"toy-001-spec-m", "toy-001-spec-b", "toy-001-syc-m",
                              "toy-001-syc-b", "toy-001-syc-agree-b"}
        for pair in ("toy-001-spec", "toy-001-syc"):
            m, b = by_id[f"{pair}-m"], by_id[f"{pair}-b"]
            assert m.request == b.request and m.label is True and b.label is False
            assert m.gold_spans and not b.gold_spans and m.response != b.response
            assert all(m.response[s:e].strip() == m.response[s:e] for s, e in m.gold_spans)
        agree = by_id["toy-001-syc-agree-b"]
        assert agree.meta["unpaired"] and agree.meta["hard_negative"] and agree.label is False


def test_claims_in_the_samples_hold_when_rerun(problem, outcomes):
    held = range(len(problem.visible), len(problem.tests))
    for out in outcomes:
        by_id = {s.id: s for s in out.samples}
        spec_m = by_id["toy-001-spec-m"]
        hack = code_of(spec_m.response)
        assert proxy_passes(problem, hack)
        assert not evaluate(problem, [hack]).variants[0].passes(held)
        assert all(evaluate(problem, [code_of(by_id["toy-001-spec-b"].response)]).variants[0]
                   .tests)
        syc_m, syc_b = by_id["toy-001-syc-m"], by_id["toy-001-syc-b"]
        call = ast.parse(syc_m.meta["claim_call"]).body[0].value
        args = "(" + "".join(ast.unparse(a) + ", " for a in call.args) + ")"
        res = evaluate(problem, [code_of(syc_m.response), code_of(syc_b.response)], [args])
        assert res.variants[0].outputs[0] == syc_m.meta["claimed_value"]
        assert res.variants[1].outputs[0] == syc_m.meta["true_value"] != syc_m.meta[
            "claimed_value"]
        assert f"`{syc_m.meta['claimed_value']}`" in syc_m.response[slice(*syc_m.gold_spans[0])] \
            or f"`{syc_m.meta['claimed_value']}`" in syc_m.response[slice(*syc_m.gold_spans[-1])]
        assert f"`{syc_m.meta['true_value']}`" in syc_b.response


def test_problem_samples_are_deterministic(problem, outcomes):
    again = problem_samples(problem, 0, agree_rate=1.0)
    assert [s.to_dict() for s in again.samples] == [s.to_dict() for s in outcomes[0].samples]


SET_PROGRAM = '''
from calimon.data.codegen import CodeProblem, split_check
from calimon.data.codegen.context import expected_literals

CHECK = """
def check(candidate):
    assert candidate(('x', 'y', 'z', 'w', 'v')) == {'x', 'y', 'z', 'w', 'v'}
    assert candidate(('a',)) == [{'a', 'b', 'c', 'd', 'e'}]
    assert candidate(()) == set()
"""
visible, held, _ = split_check(CHECK)
p = CodeProblem(pid="Toy/2", key="toy-002", source="toy", task="t", task_is_code=False,
                entry_point="f", params=("t",), header="", reference="def f(t):\\n    return set(t)\\n",
                visible=visible, held=held, style="check")
print(expected_literals(p))
'''


def test_expected_literals_do_not_depend_on_the_hash_seed():
    """A set's repr follows the process's hash seed; the builder must not (build determinism)."""
    import os
    import subprocess
    import sys

    outs = {subprocess.run([sys.executable, "-c", SET_PROGRAM], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}
                           ).stdout for seed in range(6)}
    assert len(outs) == 1, outs
    assert "{'x', 'y', 'z', 'w', 'v'}" in outs.pop()


def test_parsing_on_threads_survives_a_switch_mid_parse():
    """The builds parse on a thread pool; CPython 3.11 keeps the AST constructor's recursion
    depth in shared state, so a thread switched out mid-parse (here forced by a garbage
    collection callback, as a finalizer or a warning can do) made another thread's parse fail
    with SystemError. calimon's parse helpers take one lock."""
    import gc
    import threading
    import time

    from calimon.data.codegen import hacks as H
    from calimon.data.codegen.problem import parse

    text = "[" + ", ".join(f"({i}, [{i}, {{{i}: 's'}}], {float(i)!r})" for i in range(30)) + "]"
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(150):
                assert H.literal(text)[3][0] == 3
                parse(f"x = {text}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def switch(phase, info):
        if phase == "start":
            time.sleep(0)

    old = gc.get_threshold()
    gc.set_threshold(50, 1, 1)
    gc.callbacks.append(switch)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.callbacks.remove(switch)
        gc.set_threshold(*old)
    assert errors == []
