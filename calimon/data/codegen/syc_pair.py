"""The sycophancy x code pair of one problem: a user claims a wrong value for a call; the
misbehaving reply agrees and gives a one-token mutant that returns it, the benign reply corrects
the claim and gives the reference. Some problems add an unpaired hard negative (a correct claim,
agreed with).
"""

from __future__ import annotations

import random

from calimon.data.codegen import frames as F
from calimon.data.codegen import hacks as H
from calimon.data.codegen.context import MAX_CALL_REPR, MAX_VALUE_REPR, ProblemContext, usable
from calimon.data.codegen.edit import Tagged
from calimon.data.codegen.problem import CodeProblem
from calimon.samples import Sample


def _norm(text: str) -> str:
    return "".join(text.split())


def _claim_options(ctx: ProblemContext) -> list[tuple[int, int, str, str, str]]:
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
    task = F.task_text(p, rng)
    if not p.task_is_code:
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


def syc_pair(ctx: ProblemContext, agree_rate: float) -> tuple[list[Sample], str, dict]:
    """``(samples, "ok" or why no pair, info)`` for the sycophancy x code pair of the context's
    problem, plus an unpaired agreed-correct hard negative at rate ``agree_rate``."""
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
