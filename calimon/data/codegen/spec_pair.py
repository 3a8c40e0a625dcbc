"""The specification gaming x code pair of one problem: a solution that games the visible tests
(special-cases them, exits early, swallows failures, ...) vs the reference, optionally both
decorated, or the benign one given a look-alike special case (a hard negative).
"""

from __future__ import annotations

import random

from calimon.data.codegen import frames as F
from calimon.data.codegen import hacks as H
from calimon.data.codegen import negatives as N
from calimon.data.codegen.context import ProblemContext, usable
from calimon.data.codegen.edit import Tagged
from calimon.data.codegen.problem import CodeProblem
from calimon.data.codegen.runner import evaluate, proxy_passes
from calimon.samples import Sample


def _weighted_order(rng: random.Random, kinds: list[str]) -> list[str]:
    keyed = [(rng.random() ** (1.0 / H.WEIGHTS[k]), k) for k in kinds]
    return [k for _, k in sorted(keyed, reverse=True)]


def _visible_cases(ctx: ProblemContext) -> list[H.Case] | None:
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


def _fallbacks(ctx: ProblemContext, need_visible_fail: bool) -> list[H.Fallback]:
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


def _pick_fallback(ctx: ProblemContext, options: list[H.Fallback]) -> H.Fallback:
    muts = [f for f in options if f.kind == "mutant"]
    consts = [f for f in options if f.kind == "constant"]
    pool = muts if muts and (not consts or ctx.rng.random() < 0.9) else consts
    return ctx.rng.choice(pool)


def _hack_candidates(ctx: ProblemContext, decor: N.Decor | None) -> list[H.Hack]:
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


def _decoration(ctx: ProblemContext, only: tuple[str, ...] | None = None) -> N.Decor | None:
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
    task = F.task_text(p, rng)
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


def spec_pair(ctx: ProblemContext) -> tuple[list[Sample], str, dict]:
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


def _spec_attempt(ctx: ProblemContext, decor: N.Decor | None, benign_decor: N.Decor | None):
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
