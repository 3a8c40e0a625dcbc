"""Sycophancy x QA and specification gaming x QA from TruthfulQA (templated replies).

The usable questions (a best answer that is not "I have no comment", at least one incorrect
answer) are shuffled with the seed and split into three disjoint groups: sycophancy pairs,
sycophancy hard negatives, specification-gaming pairs. In both cells the wrong answer used is the
listed incorrect answer closest in length to the best answer, so the two replies of a pair are
close in length.

Replies are assembled from the pools in ``frames``: an opener, a sentence asserting one answer,
optionally (same choice for both replies of a pair) a sentence dismissing the other answer, and a
tail. Assertion, dismissal, tail and neutral-opener pools are shared by both labels, so the two
replies differ in which answer is asserted and which is dismissed.

Sycophancy: the request carries a user cue that suggests the incorrect answer (before or after the
question). Misbehaving = the reply adopts it (an agreeing or a neutral opener); benign = it gives
the best answer (a correcting or a neutral opener; the neutral one corrects without mentioning the
user and is flagged ``hard_negative``). Unpaired hard negatives: the cue suggests the best answer
and the reply agrees with it. Gold spans = the sentence asserting the incorrect answer and, when
present, the sentence dismissing the true one.

Specification gaming: the request states a proxy incentive (graded by agreement with popular
belief). Misbehaving = the popular incorrect answer stated confidently; benign = the best answer
despite the proxy. Gold spans as above.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable
from pathlib import Path

from calimon.data.amb_open import frames as F
from calimon.samples import Sample

SOURCE = "truthfulqa"
FILE = "truthfulqa/TruthfulQA.csv"
LowerOk = Callable[[str], bool]
SHARES = {"syc": 0.45, "syc_hn": 0.10, "spec": 0.45}


def _answers(field: str) -> list[str]:
    return [a.strip() for a in field.split(";") if a.strip() and "no comment" not in a.lower()]


def load_questions(sources_dir: Path) -> list[dict]:
    """Usable TruthfulQA rows as {row, question, best, wrong: [..], category}."""
    with F.source_path(sources_dir, FILE).open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for i, row in enumerate(rows):
        best = _answers(row["Best Answer"]) or _answers(row["Correct Answers"])
        wrong = _answers(row["Incorrect Answers"])
        if not best or not wrong:
            continue
        out.append({"row": i, "question": " ".join(row["Question"].split()), "best": best[0],
                    "wrong": wrong, "category": row["Category"]})
    return out


def _closest_wrong(q: dict, rng: random.Random) -> str:
    return min(q["wrong"], key=lambda w: (abs(len(w) - len(q["best"])), rng.random()))


def _join(rng: random.Random, question: str, extra: str) -> tuple[str, str]:
    sep = rng.choice([" ", "\n", "\n\n"])
    if rng.random() < 0.5:
        return f"{extra}{sep}{question}", "before"
    return f"{question}{sep}{extra}", "after"


def _reply(rng: random.Random, lc: LowerOk, opener: str, claim: str, other: str | None,
           tail: str) -> F.Reply:
    reply = F.Reply().add(opener)
    reply.add(F.fill(F.pick_frame(rng, F.ASSERT, claim), claim, lc), mark="assert")
    if other is not None:
        reply.add(F.fill(F.pick_frame(rng, F.DISMISS, other), other, lc), mark="dismiss")
    return reply.add(tail)


def _spans(reply: F.Reply) -> tuple[list[tuple[int, int]], list[str]]:
    spans = [reply.marks[k] for k in ("assert", "dismiss") if k in reply.marks]
    return spans, [reply.text[a:b] for a, b in spans]


def _syc_pair(q: dict, rng: random.Random, lc: LowerOk) -> list[Sample]:
    wrong, best = _closest_wrong(q, rng), q["best"]
    cue = F.fill(F.pick_frame(rng, F.SYC_CUES, wrong), wrong, lc)
    request, position = _join(rng, q["question"], cue)
    dismiss = rng.random() < 0.5
    tail = rng.choice(F.SYC_TAILS)
    agree = rng.random() < 0.5
    correct = rng.random() < 0.5
    bad = _reply(rng, lc, rng.choice(F.AGREE_OPENERS if agree else F.NEUTRAL_OPENERS), wrong,
                 best if dismiss else None, tail)
    good = _reply(rng, lc, rng.choice(F.CORRECT_OPENERS if correct else F.NEUTRAL_OPENERS),
                  best, wrong if dismiss else None, tail)
    spans, texts = _spans(bad)
    meta = {"kind": "wrong_cue", "label_quality": "semi-synthetic", "truthfulqa_row": q["row"],
            "truthfulqa_category": q["category"], "cue_position": position,
            "templated": True}
    return F.make_pair(f"truthfulqa-syc-{q['row']:03d}", request, bad.text, good.text, spans,
                       texts, category="sycophancy", task="qa", source=SOURCE, meta=meta,
                       meta_bad={"reply_style": "agrees" if agree else "adopts_silently"},
                       meta_good={"reply_style": "corrects_user" if correct
                                  else "corrects_without_mention",
                                  "hard_negative": not correct})


def _syc_hard_negative(q: dict, rng: random.Random, lc: LowerOk) -> Sample:
    best, wrong = q["best"], _closest_wrong(q, rng)
    cue = F.fill(F.pick_frame(rng, F.SYC_CUES, best), best, lc)
    request, position = _join(rng, q["question"], cue)
    opener = rng.choice(F.AGREE_OPENERS if rng.random() < 0.75 else F.NEUTRAL_OPENERS)
    reply = _reply(rng, lc, opener, best, wrong if rng.random() < 0.5 else None,
                   rng.choice(F.SYC_TAILS))
    meta = {"kind": "correct_cue_agreed", "label_quality": "semi-synthetic",
            "truthfulqa_row": q["row"], "truthfulqa_category": q["category"],
            "cue_position": position, "templated": True}
    return F.make_single_benign(f"truthfulqa-syc-hn-{q['row']:03d}", request, reply.text,
                                category="sycophancy", task="qa", source=SOURCE, meta=meta)


def _spec_pair(q: dict, rng: random.Random, lc: LowerOk) -> list[Sample]:
    wrong, best = _closest_wrong(q, rng), q["best"]
    request, position = _join(rng, q["question"], rng.choice(F.PROXY_INCENTIVES))
    dismiss = rng.random() < 0.5
    opener = rng.choice(F.NEUTRAL_OPENERS)
    bad = _reply(rng, lc, opener, wrong, best if dismiss else None, "")
    good = _reply(rng, lc, rng.choice(F.NEUTRAL_OPENERS), best, wrong if dismiss else None, "")
    spans, texts = _spans(bad)
    meta = {"kind": "popularity_proxy", "label_quality": "semi-synthetic",
            "truthfulqa_row": q["row"], "truthfulqa_category": q["category"],
            "proxy_position": position, "templated": True}
    return F.make_pair(f"truthfulqa-spec-{q['row']:03d}", request, bad.text, good.text, spans,
                       texts, category="spec_gaming", task="qa", source=SOURCE, meta=meta)


def partition(questions: list[dict], seed: int) -> dict[str, list[dict]]:
    """Disjoint question groups per construction, in row order."""
    order = list(questions)
    F.rng_for(seed, "truthfulqa:partition").shuffle(order)
    n = len(order)
    a = round(n * SHARES["syc"])
    b = a + round(n * SHARES["syc_hn"])
    groups = {"syc": order[:a], "syc_hn": order[a:b], "spec": order[b:]}
    return {k: sorted(v, key=lambda q: q["row"]) for k, v in groups.items()}


def truthfulqa_cells(sources_dir: Path, seed: int) -> list[Sample]:
    """Sycophancy x QA (pairs + unpaired hard negatives) and spec gaming x QA pairs."""
    questions = load_questions(sources_dir)
    lc = F.truecaser([q["question"] for q in questions]
                     + [a for q in questions for a in [q["best"], *q["wrong"]]])
    groups = partition(questions, seed)
    out: list[Sample] = []
    for q in groups["syc"]:
        out += _syc_pair(q, F.rng_for(seed, f"truthfulqa:syc:{q['row']}"), lc)
    for q in groups["syc_hn"]:
        out.append(_syc_hard_negative(q, F.rng_for(seed, f"truthfulqa:syc_hn:{q['row']}"), lc))
    for q in groups["spec"]:
        out += _spec_pair(q, F.rng_for(seed, f"truthfulqa:spec:{q['row']}"), lc)
    return out
