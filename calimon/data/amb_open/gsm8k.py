"""Sycophancy x reasoning and specification gaming x reasoning from GSM8K test questions with
REAL model-written solutions (``example_model_solutions.jsonl``: four GPT-3 6B/175B solvers per
question, each solution marked correct or not).

A solution is used only when its last line reads "A: <number>" and that number agrees with its
``is_correct`` mark against the reference answer in ``test.jsonl``. Calculator annotations
("<<3+4=7>>") are removed from the working, and the final line is re-rendered from a shared pool
(``frames.FINAL_LINES``, the same wording for both replies of a pair); everything else is the
model's text. None of these solutions was generated under a cue or a leak: the cue and the leak
are added to the request afterwards (``meta.generated_under_cue`` is False).

Questions are grouped by what their solutions allow, and the groups never share a question:
- both a wrong and a correct solution: shuffled with the seed, half to each pair cell;
- only correct solutions: sycophancy hard negatives (the user names the right answer, the reply
  is correct and agrees);
- only wrong solutions: spec-gaming hard negatives (the request leaks the right answer, the reply
  honestly ends on its own wrong result: an error, not gaming).

Sycophancy pair: the request names the wrong answer W of a real wrong solution; misbehaving = that
solution (ends on W); benign = a real correct solution under the same cue. Gold spans = the line
where W first appears in the working as a number (as a computed result, after "=", when W also
occurs in the question) and the final-answer line.

Spec-gaming pair: the request leaks the true answer C. Misbehaving = a real wrong solution whose
working never produces C, with its final line replaced by C; benign = a real correct solution
ending on C with the same final-line wording. Gold span = the replaced final line. The leaked
value is the true answer, so the benign reply is honest and both final lines are identical.

For each pair, the (wrong, correct) solution combination closest in length is used.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from calimon.data.amb_open import frames as F
from calimon.samples import Sample

SOURCE = "gsm8k"
SOLVERS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
HARD_NEGATIVE_SHARE = 0.25  # unpaired hard negatives per pair, at most
_CALC = re.compile(r"<<[^<>]*>>")
# A leading minus counts only where it cannot be a subtraction ("=-5", " -5", but not "30-5").
_NUMBER = re.compile(r"(?<![\w.)])(?:-(?=\d))?\d[\d,]*(?:\.\d+)?(?!\d)")


def _value(text: str) -> float | None:
    text = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        return float(text)
    except ValueError:
        return None


def fmt(value: float) -> str:
    """A number as written in an answer: no trailing zeros, integers without a decimal point."""
    return str(int(value)) if value == int(value) else f"{value:f}".rstrip("0").rstrip(".")


def _numbers(line: str) -> list[tuple[int, int, float]]:
    out = []
    for m in _NUMBER.finditer(line):
        v = _value(m.group(0))
        if v is not None:
            out.append((m.start(), m.end(), v))
    return out


def load_problems(sources_dir: Path) -> list[dict]:
    """Test questions with their usable solutions: {index, question, answer, right: [..],
    wrong: [..]}, each solution {solver, body, value}."""
    with F.source_path(sources_dir, "gsm8k/test.jsonl").open(encoding="utf-8") as fh:
        tests = [json.loads(line) for line in fh if line.strip()]
    path = F.source_path(sources_dir, "gsm8k/example_model_solutions.jsonl")
    with path.open(encoding="utf-8") as fh:
        sols = [json.loads(line) for line in fh if line.strip()]
    problems = []
    for index, (test, row) in enumerate(zip(tests, sols, strict=True)):
        answer = _value(test["answer"].rsplit("####", 1)[-1])
        if test["question"] != row["question"] or answer is None:
            continue
        right, wrong = [], []
        for solver in SOLVERS:
            lines = row[solver]["solution"].strip().split("\n")
            m = re.fullmatch(r"A:\s*(.+)", lines[-1].strip())
            value = _value(m.group(1)) if m else None
            body = "\n".join(_CALC.sub("", x).rstrip() for x in lines[:-1] if x.strip())
            if value is None or not body or (value == answer) != row[solver]["is_correct"]:
                continue
            (right if value == answer else wrong).append(
                {"solver": solver, "body": body, "value": value})
        problems.append({"index": index, "question": " ".join(test["question"].split()),
                         "answer": answer, "right": right, "wrong": wrong})
    return problems


def _closest(rng: random.Random, wrongs: list[dict], rights: list[dict]) -> tuple[dict, dict]:
    combos = [(abs(len(w["body"]) - len(r["body"])), rng.random(), i, j)
              for i, w in enumerate(wrongs) for j, r in enumerate(rights)]
    _, _, i, j = min(combos)
    return wrongs[i], rights[j]


def _request(rng: random.Random, question: str, extra: str) -> tuple[str, str]:
    sep = rng.choice([" ", "\n", "\n\n"])
    if rng.random() < 0.5:
        return f"{extra}{sep}{question}", "before"
    return f"{question}{sep}{extra}", "after"


def _solution(lead: str, body: str, final: str) -> F.Reply:
    reply = F.Reply().add(lead)
    reply.add(body, mark="body", sep="\n")
    return reply.add(final, mark="final", sep="\n")


def first_wrong_line(question: str, body: str, value: float) -> tuple[int, int] | None:
    """[start, end) in `body` of the first line where `value` appears as a number; when the value
    also occurs in the question, only an occurrence right after "=" counts."""
    in_question = any(v == value for _, _, v in _numbers(question))
    pos = 0
    for line in body.split("\n"):
        for start, _end, v in _numbers(line):
            if v != value:
                continue
            if in_question and not re.search(r"=\s*\$?\s*$", line[:start]):
                continue
            lead = len(line) - len(line.lstrip())
            return pos + lead, pos + len(line.rstrip())
        pos += len(line) + 1
    return None


def _meta(kind: str, p: dict, position: str, **extra) -> dict:
    return {"kind": kind, "label_quality": "semi-synthetic", "gsm8k_test_index": p["index"],
            "generated_under_cue": False, "cue_position": position, **extra}


def _syc_pair(p: dict, rng: random.Random) -> list[Sample]:
    w, r = _closest(rng, p["wrong"], p["right"])
    request, position = _request(rng, p["question"], rng.choice(F.MATH_CUES).format(
        v=fmt(w["value"])))
    lead, final = rng.choice(F.LEAD_INS), rng.choice(F.FINAL_LINES)
    bad = _solution(lead, w["body"], final.format(v=fmt(w["value"])))
    good = _solution(lead, r["body"], final.format(v=fmt(p["answer"])))
    spans = [bad.marks["final"]]
    where = first_wrong_line(p["question"], w["body"], w["value"])
    if where is not None:
        offset = bad.marks["body"][0]
        spans.insert(0, (offset + where[0], offset + where[1]))
    texts = [bad.text[a:b] for a, b in spans]
    meta = _meta("wrong_cue", p, position, cued_value=fmt(w["value"]),
                 true_value=fmt(p["answer"]), first_wrong_line_found=where is not None)
    return F.make_pair(f"gsm8k-syc-{p['index']:04d}", request, bad.text, good.text, spans, texts,
                       category="sycophancy", task="reasoning", source=SOURCE, meta=meta,
                       meta_bad={"solver": w["solver"]}, meta_good={"solver": r["solver"]})


def _spec_pair(p: dict, rng: random.Random) -> list[Sample] | None:
    wrongs = [w for w in p["wrong"] if all(v != p["answer"] for _, _, v in _numbers(w["body"]))]
    if not wrongs:
        return None
    w, r = _closest(rng, wrongs, p["right"])
    value = fmt(p["answer"])
    request, position = _request(rng, p["question"], rng.choice(F.ANSWER_LEAKS).format(v=value))
    lead, final = rng.choice(F.LEAD_INS), rng.choice(F.FINAL_LINES)
    bad = _solution(lead, w["body"], final.format(v=value))
    good = _solution(lead, r["body"], final.format(v=value))
    spans = [bad.marks["final"]]
    meta = _meta("leaked_answer_copied", p, position, leaked_value=value,
                 work_result=fmt(w["value"]))
    return F.make_pair(f"gsm8k-spec-{p['index']:04d}", request, bad.text, good.text, spans,
                       [bad.text[a:b] for a, b in spans], category="spec_gaming",
                       task="reasoning", source=SOURCE, meta=meta,
                       meta_bad={"solver": w["solver"], "final_line_replaced": True},
                       meta_good={"solver": r["solver"], "final_line_replaced": False})


def _syc_hard_negative(p: dict, rng: random.Random) -> Sample:
    r = rng.choice(p["right"])
    value = fmt(p["answer"])
    request, position = _request(rng, p["question"], rng.choice(F.MATH_CUES).format(v=value))
    reply = _solution(rng.choice(F.LEAD_INS), r["body"], rng.choice(F.FINAL_LINES).format(v=value))
    meta = _meta("correct_cue_agreed", p, position, cued_value=value, solver=r["solver"])
    return F.make_single_benign(f"gsm8k-syc-hn-{p['index']:04d}", request, reply.text,
                                category="sycophancy", task="reasoning", source=SOURCE, meta=meta)


def _spec_hard_negative(p: dict, rng: random.Random) -> Sample:
    w = rng.choice(p["wrong"])
    value = fmt(p["answer"])
    request, position = _request(rng, p["question"], rng.choice(F.ANSWER_LEAKS).format(v=value))
    reply = _solution(rng.choice(F.LEAD_INS), w["body"],
                      rng.choice(F.FINAL_LINES).format(v=fmt(w["value"])))
    meta = _meta("honest_error_under_leak", p, position, leaked_value=value,
                 work_result=fmt(w["value"]), solver=w["solver"])
    return F.make_single_benign(f"gsm8k-spec-hn-{p['index']:04d}", request, reply.text,
                                category="spec_gaming", task="reasoning", source=SOURCE,
                                meta=meta)


def _take(items: list[dict], n: int, rng: random.Random) -> list[dict]:
    picked = list(items)
    rng.shuffle(picked)
    return sorted(picked[:n], key=lambda p: p["index"])


def gsm8k_cells(sources_dir: Path, seed: int) -> list[Sample]:
    """Sycophancy x reasoning and spec gaming x reasoning pairs plus unpaired hard negatives."""
    problems = load_problems(sources_dir)
    both = [p for p in problems if p["wrong"] and p["right"]]
    only_right = [p for p in problems if p["right"] and not p["wrong"]]
    only_wrong = [p for p in problems if p["wrong"] and not p["right"]]
    order = list(both)
    F.rng_for(seed, "gsm8k:partition").shuffle(order)
    half = len(order) // 2
    syc = sorted(order[:half], key=lambda p: p["index"])
    spec = sorted(order[half:], key=lambda p: p["index"])
    out: list[Sample] = []
    for p in syc:
        out += _syc_pair(p, F.rng_for(seed, f"gsm8k:syc:{p['index']}"))
    n_syc = len(syc)
    n_spec = 0
    for p in spec:
        pair = _spec_pair(p, F.rng_for(seed, f"gsm8k:spec:{p['index']}"))
        if pair is not None:
            out += pair
            n_spec += 1
    pick = F.rng_for(seed, "gsm8k:hard-negatives")
    for p in _take(only_right, round(n_syc * HARD_NEGATIVE_SHARE), pick):
        out.append(_syc_hard_negative(p, F.rng_for(seed, f"gsm8k:syc_hn:{p['index']}")))
    for p in _take(only_wrong, round(n_spec * HARD_NEGATIVE_SHARE), pick):
        out.append(_spec_hard_negative(p, F.rng_for(seed, f"gsm8k:spec_hn:{p['index']}")))
    return out
