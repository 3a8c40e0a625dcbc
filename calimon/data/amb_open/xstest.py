"""Safety x QA from XSTest: real model completions with two human annotations each.

Pairs: every unsafe ("contrast_*") prompt that received at least one full compliance and at least
one full refusal on which both annotators agree. The misbehaving reply is a compliance, the benign
reply a refusal, chosen among the four completion files to make the two lengths as close as
possible. The gold span is the substantive part of the compliance: the whole reply minus trailing
paragraphs that are only a caution or disclaimer (the help itself is the misbehavior; a closing
"be careful" note is not).

Hard negatives: safe prompts answered in full compliance (both annotators agree). They have no
misbehaving counterpart, so each is a benign sample of its own (``meta.unpaired``).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from calimon.data.amb_open.frames import make_pair, make_single_benign, rng_for, source_path
from calimon.samples import Sample

SOURCE = "xstest"
MODELS = ("llama2new", "llama2orig", "mistralguard", "mistralinstruct")
COMPLY, REFUSE = "1_full_compliance", "2_full_refusal"
# Compliant replies on unsafe prompts come mostly from the Mistral models; hard negatives prefer
# them too so that the model's style does not separate the classes.
HARD_NEGATIVE_MODELS = ("mistralinstruct", "mistralguard")
HARD_NEGATIVE_SHARE = 0.6  # hard negatives per gold pair, at most

_CAUTION = re.compile(
    r"^\s*(\W*\s*)?(however,?\s+|additionally,?\s+|also,?\s+|finally,?\s+|overall,?\s+)?"
    r"(it'?s|it is) (also |very |extremely )?(important|essential|crucial|worth noting|"
    r"advisable)|^\s*(please )?(note|remember|keep in mind|be aware|disclaimer|warning|caution)"
    r"|^\s*(i )?(must|would) (stress|emphasi[sz]e|remind|note)|^\s*always (consult|seek|check)",
    re.IGNORECASE)


def substantive_span(response: str) -> tuple[int, int]:
    """[start, end) of the reply without trailing caution-only paragraphs."""
    paragraphs = [(m.start(), m.end()) for m in re.finditer(r"\S(?:.*?\S)?(?=\n\s*\n|\s*$)",
                                                           response, flags=re.DOTALL)]
    if not paragraphs:
        return 0, len(response)
    keep = list(paragraphs)
    while len(keep) > 1 and _CAUTION.search(response[keep[-1][0]:keep[-1][1]].replace("’", "'")):
        keep.pop()
    return keep[0][0], keep[-1][1]


def _read(sources_dir: Path) -> tuple[dict[str, dict], dict[str, dict[str, dict]]]:
    with source_path(sources_dir, "xstest/xstest_prompts.csv").open(encoding="utf-8") as fh:
        prompts = {row["id"]: row for row in csv.DictReader(fh)}
    completions: dict[str, dict[str, dict]] = {}
    for model in MODELS:
        path = source_path(sources_dir, f"xstest/completions_{model}.csv")
        with path.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                pid = row["id"].removeprefix("v2-")
                if pid not in prompts or prompts[pid]["type"] != row["type"]:
                    raise AssertionError(f"xstest/{model}: row {row['id']} does not match the "
                                         "prompt file")
                completions.setdefault(pid, {})[model] = row
    for pid, rows in completions.items():
        if len({r["prompt"] for r in rows.values()}) != 1:
            raise AssertionError(f"xstest: the completion files disagree on prompt {pid}")
    return prompts, completions


def _request(prompts: dict[str, dict], rows: dict[str, dict], pid: str) -> tuple[str, dict]:
    """The prompt the models actually answered (one prompt was reworded in the prompt file after
    the completions were collected)."""
    asked = rows[MODELS[0]]["prompt"]
    return asked, ({"prompt_file_wording_differs": True}
                   if asked != prompts[pid]["prompt"] else {})


def _agreed(row: dict, label: str) -> bool:
    return (row["final_label"] == label and row["annotation_1"] == label
            and row["annotation_2"] == label and row["completion"].strip() != "")


def xstest_cells(sources_dir: Path, seed: int) -> list[Sample]:
    """Safety x QA gold pairs and safe-prompt hard negatives from XSTest."""
    rng = rng_for(seed, "xstest")
    prompts, completions = _read(sources_dir)
    order = sorted(prompts, key=int)
    out: list[Sample] = []
    for pid in order:
        if prompts[pid]["label"] != "unsafe":
            continue
        rows = completions[pid]
        comply = [m for m in MODELS if _agreed(rows[m], COMPLY)]
        refuse = [m for m in MODELS if _agreed(rows[m], REFUSE)]
        if not comply or not refuse:
            continue
        combos = [(abs(len(rows[c]["completion"].strip()) - len(rows[r]["completion"].strip())),
                   rng.random(), c, r) for c in comply for r in refuse]
        _, _, mc, mr = min(combos)
        bad, good = rows[mc]["completion"].strip(), rows[mr]["completion"].strip()
        start, end = substantive_span(bad)
        request, note = _request(prompts, rows, pid)
        meta = {"kind": "real_compliance_vs_refusal", "label_quality": "gold",
                "xstest_prompt_id": int(pid), "xstest_type": prompts[pid]["type"],
                "annotation": "two annotators agree", **note}
        out += make_pair(f"xstest-u{int(pid):03d}", request, bad, good,
                         [(start, end)], [bad[start:end]], category="safety", task="qa",
                         source=SOURCE, meta=meta,
                         meta_bad={"model": mc, "final_label": COMPLY,
                                   "span_rule": "reply minus trailing caution paragraphs"},
                         meta_good={"model": mr, "final_label": REFUSE})
    n_pairs = len(out) // 2
    safe = []
    for pid in order:
        if prompts[pid]["label"] != "safe":
            continue
        rows = completions[pid]
        models = [m for m in HARD_NEGATIVE_MODELS if _agreed(rows[m], COMPLY)]
        models = models or [m for m in MODELS if _agreed(rows[m], COMPLY)]
        if models:
            safe.append((pid, rng.choice(models)))
    rng.shuffle(safe)
    chosen = sorted(safe[:int(n_pairs * HARD_NEGATIVE_SHARE)], key=lambda t: int(t[0]))
    for pid, model in chosen:
        request, note = _request(prompts, completions[pid], pid)
        meta = {"kind": "safe_prompt_full_compliance", "label_quality": "gold",
                "xstest_prompt_id": int(pid), "xstest_type": prompts[pid]["type"],
                "model": model, "final_label": COMPLY, "annotation": "two annotators agree",
                **note}
        out.append(make_single_benign(f"xstest-s{int(pid):03d}", request,
                                      completions[pid][model]["completion"].strip(),
                                      category="safety", task="qa", source=SOURCE, meta=meta))
    return out
