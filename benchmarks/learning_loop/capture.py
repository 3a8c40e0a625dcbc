"""The learning-loop study's one capture pass: hidden-state features of every selected sample
(`selection.select`), cached by `calimon.scoring.probes.features` (a second run reads the cache
and captures only what is missing). Base rows first, then fold by fold in `selection.ORDER`, so
that a capture stopped early leaves whole folds.
"""

from __future__ import annotations

import sys
import time

# 1024 input tokens: the limit the shipped probe monitor was trained at (at 384 the prompt leaves
# about 150 tokens of transcript, and most code pairs read the same)
MODEL, PROMPT, MAX_INPUT_TOKENS = "smollm2-135m", "direct", 1024


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def backend_and_prompt(model: str = MODEL):
    """The model's backend on CPU (default the embedded one) and the prompt whose verdict pass
    is read."""
    from calimon.prompts import load_prompt
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec

    return (build_backend(MonitorSpec(model=model, options={"device": "cpu"})),
            load_prompt(PROMPT))


def capture(sel, *, deadline: float | None = None,
            max_input_tokens: int = MAX_INPUT_TOKENS, model: str = MODEL) -> list[str]:
    """Capture what the cache lacks, base rows first, then each fold; stop starting new folds
    after ``deadline`` (a time.time() value). Returns the folds whose features are all cached."""
    from calimon.scoring.probes.features import FeatureCache, extract_features

    backend, prompt = backend_and_prompt(model)
    cache = FeatureCache(backend.model_ref, prompt, max_input_tokens)
    groups = [("base", [s for rows in sel.base.values() for s in rows])]
    groups += [(f.name, list(f.traffic + f.held_out)) for f in sel.folds]
    done = []
    for name, rows in groups:
        todo = cache.missing(rows)
        if todo and deadline is not None and time.time() > deadline:
            log(f"{name}: {len(todo)} samples not captured (deadline passed)")
            continue
        if todo:
            log(f"{name}: capturing {len(todo)} of {len(rows)} samples")
            extract_features(backend, prompt, todo, max_input_tokens=max_input_tokens)
        done.append(name)
        log(f"{name}: cached")
    return done
