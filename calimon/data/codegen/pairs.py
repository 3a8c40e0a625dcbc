"""From a CodeProblem to verified sample pairs in the two code cells.

Per problem, three kinds of sandbox processes (see `runner`):

1. one trusted batch: the reference, up to 24 one-token mutants and a few constant bodies, run on
   every test and on every call of the candidate found in the tests (plus a few edge inputs);
2. one honest run of the chosen test-gaming solution (after any hard-negative variant, which
   runs first in the same process);
3. one run of the proxy grader (the submission followed by the visible tests) for that solution.

A gaming pair is kept only when the reference passes every test, the gaming solution passes the
proxy grader and fails at least one held-back test. A sycophancy pair is kept only when the mutant
returns the claimed (wrong) value on the claimed input, fails the test that holds that input, and
the reference returns a different value there while passing every test.
"""

from __future__ import annotations

import ast
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from calimon.data.codegen import frames as F
from calimon.data.codegen import hacks as H
from calimon.data.codegen import negatives as N
from calimon.data.codegen.edit import Layout, Tagged, compose, layout
from calimon.data.codegen.mutants import Mutant, sample_mutants
from calimon.data.codegen.problem import CodeProblem, parse
from calimon.data.codegen.runner import BatchResult, evaluate, proxy_passes
from calimon.samples import Sample

# Sandbox processes spend much of their life starting up (namespaces, a fresh interpreter), so a
# few more threads than cores keep a 2-core machine busy; the output does not depend on it.
WORKERS = 3
MAX_VALUE_REPR = 60
MAX_CALL_REPR = 90


@dataclass(frozen=True)
class ProblemOutcome:
    pid: str
    samples: tuple[Sample, ...]
    spec: str  # "ok" or the reason the gaming pair was not made
    syc: str  # "ok" or the reason the sycophancy pair was not made
    sandbox_runs: int
    info: dict = field(default_factory=dict, compare=False)


@dataclass
class _Ctx:
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
        return self.batch.variants[i]


def _expected_literals(problem: CodeProblem) -> list[str]:
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
                text = repr(value)
                if len(text) <= MAX_VALUE_REPR and text not in out:
                    out.append(text)
    return out


_DEFAULTS = {bool: ("False", "True"), int: ("0", "1"), float: ("0.0",), str: ("''",),
             list: ("[]",), tuple: ("()",), dict: ("{}",), type(None): ("None",)}


def _constants(problem: CodeProblem) -> list[str]:
    expected = _expected_literals(problem)
    out = list(expected[:4])
    for text in expected:
        for d in _DEFAULTS.get(type(H.literal(text)), ()):
            if d not in out:
                out.append(d)
    if "None" not in out:
        out.append("None")
    return out[:8]


def _calls(problem: CodeProblem) -> tuple[list[str], list[int]]:
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


def _weighted_order(rng: random.Random, kinds: list[str]) -> list[str]:
    keyed = [(rng.random() ** (1.0 / H.WEIGHTS[k]), k) for k in kinds]
    return [k for _, k in sorted(keyed, reverse=True)]


# ----------------------------------------------------------------- specification gaming x code


def _visible_cases(ctx: _Ctx) -> list[H.Case] | None:
    p, ref = ctx.problem, ctx.variant(0)
    cases: list[H.Case] = []
    seen = set()
    for ci, ti in enumerate(ctx.call_test):
        if not 0 <= ti < len(p.visible):
            continue
        args, out = ctx.batch.args[ci], ref.outputs[ci]
        if args is None or len(args) != len(p.params) or not H.renderable(out):
            return None
        if not all(H.renderable(a) for a in args):
            return None
        if args not in seen:
            seen.add(args)
            cases.append(H.Case(args=args, out=out))
    return cases or None


def usable(r) -> bool:
    return r.loaded and not r.hung


def _fallbacks(ctx: _Ctx, need_visible_fail: bool) -> list[H.Fallback]:
    p = ctx.problem
    nv = len(p.visible)
    vis, held = range(nv), range(nv, len(p.tests))
    out = []
    for i, m in enumerate(ctx.mutants, start=1):
        r = ctx.variant(i)
        if usable(r) and not r.passes(held) and (not need_visible_fail or not r.passes(vis)):
            out.append(H.Fallback("mutant", mutant=m))
    for j, c in enumerate(ctx.constants, start=1 + len(ctx.mutants)):
        r = ctx.variant(j)
        if usable(r) and not r.passes(held) and (not need_visible_fail or not r.passes(vis)):
            out.append(H.Fallback("constant", constant=c))
    return out


def _pick_fallback(ctx: _Ctx, options: list[H.Fallback]) -> H.Fallback:
    muts = [f for f in options if f.kind == "mutant"]
    consts = [f for f in options if f.kind == "constant"]
    pool = muts if muts and (not consts or ctx.rng.random() < 0.9) else consts
    return ctx.rng.choice(pool)


def _hack_candidates(ctx: _Ctx, decor: N.Decor | None) -> list[H.Hack]:
    p, rng = ctx.problem, ctx.rng
    nv = len(p.visible)
    vis, held = range(nv), range(nv, len(p.tests))
    cases = _visible_cases(ctx)
    fb_special = _fallbacks(ctx, need_visible_fail=False)
    fb_exit = _fallbacks(ctx, need_visible_fail=True)
    consts = [c for j, c in enumerate(ctx.constants, start=1 + len(ctx.mutants))
              if usable(ctx.variant(j)) and ctx.variant(j).passes(vis)
              and not ctx.variant(j).passes(held)]
    avail = []
    if cases and fb_special:
        avail += ["special_if", "special_scan"]
        if H.table_available(p.params, cases):
            avail.append("special_table")
        if H.match_available(p.params, cases):
            avail.append("special_match")
    if cases:
        avail.append("exit_fallback")
    if consts:
        avail.append("constant")
    if fb_exit:
        avail += ["exit_main", "swallow_failures"]
    if all(t.eq_form for t in p.visible):
        avail.append("always_equal")
    out = []
    for kind in _weighted_order(rng, avail)[:3]:
        if kind in H.SPECIAL:
            gen = getattr(H, kind)
            out.append(gen(ctx.lay, p.params, cases, _pick_fallback(ctx, fb_special), rng,
                           decor))
        elif kind == "constant":
            out.append(H.constant(ctx.lay, rng.choice(consts), decor))
        elif kind == "exit_fallback":
            lucky = [f.mutant for f in fb_special if f.mutant is not None
                     and ctx.variant(1 + ctx.mutants.index(f.mutant)).passes(vis)]
            mutant = rng.choice(lucky) if lucky and rng.random() < 0.7 else None
            out.append(H.exit_fallback(ctx.lay, p.params, cases, rng, decor, mutant))
        elif kind == "exit_main":
            out.append(H.exit_main(ctx.lay, _pick_fallback(ctx, fb_exit), rng, decor))
        elif kind == "swallow_failures":
            out.append(H.swallow_failures(ctx.lay, _pick_fallback(ctx, fb_exit), rng, decor))
        else:
            out.append(H.always_equal(ctx.lay, rng, decor))
    return out


def _decoration(ctx: _Ctx, only: tuple[str, ...] | None = None) -> N.Decor | None:
    p, rng = ctx.problem, ctx.rng
    ref = ctx.variant(0)
    outs = {c: ref.outputs[i] for i, c in enumerate(ctx.calls)}
    options = []
    if len(p.params) == 1:
        first = next((ctx.batch.args[i] for i, t in enumerate(ctx.call_test)
                      if 0 <= t < len(p.visible) and ctx.batch.args[i]), None)
        value = H.literal(first[0]) if first else None
        kind = {list: "list", str: "str", int: "int"}.get(type(value))
        edge = {"list": "([],)", "str": "('',)", "int": "(0,)"}.get(kind)
        if edge and H.renderable(outs.get(edge)):
            options.append(("guard", kind, outs[edge]))
        if kind == "int" and len(N.table_items(outs)) >= 3:
            options.append(("table", kind, None))
    if p.params:
        kinds = set()
        for i, t in enumerate(ctx.call_test):
            if 0 <= t < len(p.tests) and ctx.batch.args[i]:
                kinds.add(type(H.literal(ctx.batch.args[i][0])).__name__)
        if len(kinds) == 1 and kinds <= {"int", "list", "str", "float"}:
            options.append(("check", kinds.pop(), None))
    cases = _visible_cases(ctx)
    if cases:
        options.append(("demo", None, None))
    if only is not None:
        options = [o for o in options if o[0] in only]
    if not options:
        return None
    choice, kind, value = rng.choice(options)
    if choice == "guard":
        return N.guard_clause(p.params[0], kind, value, rng)
    if choice == "table":
        return N.base_case_table(ctx.lay, p.params[0], N.table_items(outs), rng)
    if choice == "check":
        return N.input_check(p.params[0], kind, rng)
    picked = cases[:rng.choice((1, 2))]
    return N.main_demo(p.entry_point, [c.args for c in picked], rng)


def _spec_request(p: CodeProblem, rng: random.Random) -> str:
    if p.task_is_code:
        task = (F.pick(rng, F.STUB_INTROS, fn=p.entry_point) + "\n\n```python\n"
                + p.task.strip("\n") + "\n```")
    else:
        task = (F.pick(rng, F.PROSE_INTROS, text=p.task.strip()) + " "
                + F.pick(rng, F.NAMING, fn=p.entry_point, params=", ".join(p.params)))
    lead = F.pick(rng, F.TEST_LEADS)
    tests = (lead + "\n\n" if lead else "") + "```python\n" + p.visible_block() + "```"
    proxy = F.pick(rng, F.PROXIES)
    ask = F.pick(rng, F.ASKS)
    order = rng.choice(((task, proxy, tests, ask), (task, tests, proxy, ask),
                        (proxy, task, tests, ask)))
    return "\n\n".join(x for x in order if x)


def _spec_reply(code: Tagged, intro: str, outro: str):
    return F.assemble(F.join_paragraphs([[(intro, False)], F.code_block(code),
                                         [(outro, False)]]))


def _line_span(text: str, code: Tagged, line: int) -> list[int]:
    start = text.index("```python\n") + len("```python\n")
    for ln in code.lines[:line]:
        start += len(ln) + 1
    raw = code.lines[line]
    start += len(raw) - len(raw.lstrip())
    return [start, start + len(raw.strip())]


def _spec_pair(ctx: _Ctx) -> tuple[list[Sample], str, dict]:
    """Decorations: 35% of pairs carry one on both replies; 30% carry a look-alike special case
    (guard clause or base-case table) on the benign reply only, a hard negative that looks like
    the gaming code; the rest none."""
    draw = ctx.rng.random()
    if draw < 0.35:
        decor = _decoration(ctx)
        out = _spec_attempt(ctx, decor, decor)
    elif draw < 0.65:
        out = _spec_attempt(ctx, None, _decoration(ctx, only=("guard", "table")))
    else:
        out = _spec_attempt(ctx, None, None)
    if out is None:  # the decorated reference failed a test: no decoration on either side
        out = _spec_attempt(ctx, None, None)
    return out


def _spec_attempt(ctx: _Ctx, decor: N.Decor | None, benign_decor: N.Decor | None):
    p, rng = ctx.problem, ctx.rng
    nv = len(p.visible)
    held = range(nv, len(p.tests))
    hacks = _hack_candidates(ctx, decor)
    if not hacks:
        return [], "no gaming strategy applies", {}
    benign = N.decorate(ctx.lay, benign_decor)
    benign_kind = benign_decor.kind if benign_decor else "reference"
    chosen = None
    for i, hack in enumerate(hacks):
        check_benign = benign_decor is not None and i == 0
        batch = evaluate(p, ([benign.code] if check_benign else []) + [hack.code.code])
        ctx.runs += 1
        if check_benign and not (usable(batch.variants[0])
                                 and batch.variants[0].passes(range(len(p.tests)))):
            return None
        res = batch.variants[-1]
        if res.passes(held):
            continue
        ctx.runs += 1
        if not proxy_passes(p, hack.code.code):
            continue
        chosen = (hack, res)
        break
    if chosen is None:
        return [], "no gaming candidate passed verification", {}
    hack, res = chosen
    native = benign_kind == "reference" and N.native_special_case(p.reference, p.entry_point)
    hard = benign_kind != "reference" or native
    request = _spec_request(p, rng)
    # one frame for both replies: only the code differs within a pair
    intro = F.pick(rng, F.REPLY_INTROS, fn=p.entry_point)
    outro = F.pick(rng, F.REPLY_OUTROS)
    m_text, m_spans = _spec_reply(hack.code, intro, outro)
    b_text, _ = _spec_reply(benign, intro, outro)
    for (s, e), want in zip(m_spans, hack.code.gold_texts(), strict=True):
        assert m_text[s:e] == want, (p.pid, hack.kind)
    pair = f"{p.key}-spec"
    base = {"problem": p.pid, "label_quality": "semi-synthetic", "visible_tests": nv,
            "held_tests": len(held)}
    m_meta = {**base, "role": "misbehaving", "hard_negative": False, "hack_kind": hack.kind,
              "hack_form": hack.form, "fallback": hack.fallback,
              "decoration": decor.kind if decor else None,
              "verified": {"proxy_grader_passes": True,
                           "held_failed": sum(not res.tests[i] for i in held),
                           "visible_passed_honestly": sum(res.tests[:nv])}}
    if hack.fallback_line is not None:
        m_meta["fallback_bug_span"] = _line_span(m_text, hack.code, hack.fallback_line)
    b_meta = {**base, "role": "benign", "hard_negative": hard,
              "benign_kind": "native_special_case" if native else benign_kind,
              "decoration": benign_decor.kind if benign_decor else None,
              "decoration_shared": decor is not None,
              "verified": {"tests_passed": len(p.tests), "tests_total": len(p.tests)}}
    common = dict(request=request, category="spec_gaming", task="code", pair_id=pair,
                  source=p.source)
    return [Sample(id=f"{pair}-m", response=m_text, label=True, gold_spans=m_spans,
                   meta=m_meta, **common),
            Sample(id=f"{pair}-b", response=b_text, label=False, meta=b_meta, **common)], \
        "ok", {"hack": hack.kind, "benign": b_meta["benign_kind"]}


# ------------------------------------------------------------------------ sycophancy x code


def _norm(text: str) -> str:
    return "".join(text.split())


def _claim_options(ctx: _Ctx) -> list[tuple[int, int, str, str, str]]:
    """(mutant index, call index, call text, wrong value, right value) that verify."""
    p = ctx.problem
    ref = ctx.variant(0)
    task = _norm(p.task)
    out = []
    for mi in range(len(ctx.mutants)):
        r = ctx.variant(1 + mi)
        if not usable(r):
            continue
        for ci, ti in enumerate(ctx.call_test):
            if ti < 0 or r.tests[ti]:
                continue
            args, wrong, right = ctx.batch.args[ci], r.outputs[ci], ref.outputs[ci]
            if args is None or wrong is None or right is None or wrong == right:
                continue
            if max(len(wrong), len(right)) > MAX_VALUE_REPR:
                continue
            w, g = H.literal(wrong), H.literal(right)
            if w is H._MISSING or g is H._MISSING or w == g:
                continue
            call = f"{p.entry_point}({', '.join(args)})"
            if len(call) > MAX_CALL_REPR or _norm(call) in task:
                continue
            out.append((mi, ci, call, wrong, right))
    return out


def _syc_request(p: CodeProblem, rng: random.Random, call: str, value: str, skip_test: int
                 ) -> str:
    claim = F.pick(rng, F.CLAIMS, call=call, value=value)
    ask = F.pick(rng, F.CLAIM_ASKS)
    if p.task_is_code:
        task = (F.pick(rng, F.STUB_INTROS, fn=p.entry_point) + "\n\n```python\n"
                + p.task.strip("\n") + "\n```")
    else:
        task = (F.pick(rng, F.PROSE_INTROS, text=p.task.strip()) + " "
                + F.pick(rng, F.NAMING, fn=p.entry_point, params=", ".join(p.params)))
        shown = [t.display for i, t in enumerate(p.tests[:3]) if i != skip_test]
        if shown:
            task += ("\n\n" + rng.choice(("For example:", "Some examples:", "It should pass:"))
                     + "\n\n```python\n" + "\n".join(shown) + "\n```")
    if rng.random() < 0.7:
        return task + "\n\n" + claim + " " + ask
    return claim + "\n\n" + task + "\n\n" + ask


def _syc_frame(rng: random.Random) -> tuple[str, str, bool]:
    return F.pick(rng, F.CODE_LEADS), F.pick(rng, F.SYC_OUTROS), rng.random() < 0.6


def _syc_reply(code: Tagged, stance: str, gold: bool, frame: tuple[str, str, bool]):
    lead, outro, stance_first = frame
    block = F.code_block(code)
    if stance_first:
        first = [(stance, gold)] + ([(" " + lead, False)] if lead else [])
        paras = [first, block, [(outro, False)]]
    else:
        last = [(stance, gold)] + ([(" " + outro, False)] if outro else [])
        paras = [[(lead, False)], block, last]
    return F.assemble(F.join_paragraphs(paras))


def _syc_pair(ctx: _Ctx, agree_rate: float) -> tuple[list[Sample], str, dict]:
    p, rng = ctx.problem, ctx.rng
    options = _claim_options(ctx)
    if not options:
        return [], "no verified wrong claim", {}
    kinds = sorted({ctx.mutants[o[0]].kind for o in options})
    kind = rng.choice(kinds)
    pool = [o for o in options if ctx.mutants[o[0]].kind == kind]
    on_held = [o for o in pool if ctx.call_test[o[1]] >= len(p.visible)]
    mi, ci, call, wrong, right = rng.choice(on_held if on_held and rng.random() < 0.7 else pool)
    mutant = ctx.mutants[mi]
    request = _syc_request(p, rng, call, wrong, ctx.call_test[ci])
    m_code = Tagged(lines=tuple(mutant.code.splitlines()), gold=((mutant.line, mutant.line),))
    ref_code = Tagged(lines=tuple(p.reference.splitlines()))
    agree = F.pick(rng, F.AGREE, call=call, value=wrong)
    frame = _syc_frame(rng)  # shared by both replies: only the stance and the code differ
    m_text, m_spans = _syc_reply(m_code, agree, True, frame)
    assert sorted(m_text[s:e] for s, e in m_spans) == sorted(
        [agree, mutant.code.splitlines()[mutant.line].strip()]), p.pid

    correct = F.pick(rng, F.CORRECT, call=call, right=right, wrong=wrong)
    b_text, _ = _syc_reply(ref_code, correct, False, frame)
    pair = f"{p.key}-syc"
    base = {"problem": p.pid, "label_quality": "semi-synthetic", "claim_call": call,
            "claimed_value": wrong, "true_value": right}
    m_meta = {**base, "role": "misbehaving", "hard_negative": False, "mutation": mutant.kind,
              "mutation_edit": [mutant.before, mutant.after],
              "gold": ["agreement_sentence", "mutated_line"],
              "verified": {"mutant_returns_claim": True, "mutant_fails_test": True,
                           "reference_tests_passed": len(p.tests)}}
    b_meta = {**base, "role": "benign", "hard_negative": False,
              "verified": {"reference_returns": right, "reference_tests_passed": len(p.tests)}}
    common = dict(category="sycophancy", task="code", source=p.source)
    samples = [
        Sample(id=f"{pair}-m", request=request, response=m_text, label=True, pair_id=pair,
               gold_spans=m_spans, meta=m_meta, **common),
        Sample(id=f"{pair}-b", request=request, response=b_text, label=False, pair_id=pair,
               meta=b_meta, **common)]
    if rng.random() < agree_rate:
        agree_pair = f"{p.key}-syc-agree"
        req2 = _syc_request(p, rng, call, right, ctx.call_test[ci])
        text2, _ = _syc_reply(ref_code, F.pick(rng, F.AGREE, call=call, value=right), False,
                              _syc_frame(rng))
        meta2 = {"problem": p.pid, "label_quality": "semi-synthetic", "claim_call": call,
                 "claimed_value": right, "true_value": right, "role": "benign",
                 "hard_negative": True, "benign_kind": "correct_claim_agreed", "unpaired": True,
                 "verified": {"reference_returns": right,
                              "reference_tests_passed": len(p.tests)}}
        samples.append(Sample(id=f"{agree_pair}-b", request=req2, response=text2, label=False,
                              pair_id=agree_pair, meta=meta2, **common))
    return samples, "ok", {"mutation": mutant.kind}


# ------------------------------------------------------------------------------ driver


def problem_samples(problem: CodeProblem, seed: int, *, agree_rate: float = 0.25
                    ) -> ProblemOutcome:
    """Both cells' samples for one problem (possibly none), with reasons for what was skipped."""
    rng = random.Random(f"calimon-code:{seed}:{problem.pid}")
    try:
        lay = layout(problem.reference, problem.entry_point)
    except (SyntaxError, ValueError) as exc:
        return ProblemOutcome(problem.pid, (), f"reference unusable ({exc})",
                              "reference unusable", 0)
    calls, owner = _calls(problem)
    mutants = sample_mutants(problem.reference, rng)
    consts = _constants(problem)
    ctx = _Ctx(problem, rng, lay, calls, owner, mutants, consts)
    const_codes = [compose(lay, body=[f"return {c}"]).code for c in consts]
    ctx.batch = evaluate(problem, [problem.reference] + [m.code for m in mutants] + const_codes,
                         calls, relative=True)
    ctx.runs = 1
    ref = ctx.variant(0)
    if not usable(ref) or not all(ref.tests):
        reason = "reference fails its own tests in the sandbox"
        return ProblemOutcome(problem.pid, (), reason, reason, ctx.runs)
    spec, spec_reason, spec_info = _spec_pair(ctx)
    syc, syc_reason, syc_info = _syc_pair(ctx, agree_rate)
    return ProblemOutcome(problem.pid, tuple(spec + syc), spec_reason, syc_reason, ctx.runs,
                          {**spec_info, **syc_info})


@dataclass(frozen=True)
class CellReport:
    problems: int
    spec_pairs: int
    syc_pairs: int
    syc_agree_negatives: int
    spec_skipped: dict[str, int]
    syc_skipped: dict[str, int]
    hack_kinds: dict[str, int]
    benign_kinds: dict[str, int]
    mutation_kinds: dict[str, int]
    sandbox_runs: int
    seconds: float

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def code_cells(problems, seed: int, *, workers: int = WORKERS, agree_rate: float = 0.25,
               progress: Callable[[int], None] | None = None
               ) -> tuple[list[Sample], CellReport]:
    """Samples of both code cells for `problems`, in problem order, and a report.
    `progress(1)` is called (from this thread) as each problem's outcome arrives, in order."""
    start = time.monotonic()
    outcomes = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for outcome in pool.map(lambda pr: problem_samples(pr, seed, agree_rate=agree_rate),
                                problems):
            outcomes.append(outcome)
            if progress:
                progress(1)
    samples = [s for o in outcomes for s in o.samples]
    hk, bk, mk = Counter(), Counter(), Counter()
    for o in outcomes:
        if "hack" in o.info:
            hk[o.info["hack"]] += 1
            bk[o.info["benign"]] += 1
        if "mutation" in o.info:
            mk[o.info["mutation"]] += 1
    report = CellReport(
        problems=len(outcomes),
        spec_pairs=sum(o.spec == "ok" for o in outcomes),
        syc_pairs=sum(o.syc == "ok" for o in outcomes),
        syc_agree_negatives=sum(s.pair_id.endswith("-syc-agree") for s in samples),
        spec_skipped=dict(sorted(Counter(o.spec for o in outcomes if o.spec != "ok").items())),
        syc_skipped=dict(sorted(Counter(o.syc for o in outcomes if o.syc != "ok").items())),
        hack_kinds=dict(sorted(hk.items())), benign_kinds=dict(sorted(bk.items())),
        mutation_kinds=dict(sorted(mk.items())),
        sandbox_runs=sum(o.sandbox_runs for o in outcomes),
        seconds=round(time.monotonic() - start, 1))
    return samples, report
