"""The quotes a quote monitor gave: the ``evidence`` list of its reading, or, when its JSON
verdict could not be parsed, the evidence list read off its generated text."""

from __future__ import annotations

import json
import re


def evidence_list(text: str) -> tuple[str, ...]:
    """The strings directly inside the first ``"evidence": [...]`` list of generated text,
    also when the JSON around it is malformed or cut off (items that are not strings, such as
    objects, are skipped; so are their inner strings)."""
    m = re.search(r'"evidence"\s*:\s*\[', text or "")
    if not m:
        return ()
    out, depth, k = [], 0, m.end()
    while k < len(text):
        ch = text[k]
        if ch == '"':
            lit = re.match(r'"(?:[^"\\]|\\.)*"', text[k:])
            if not lit:  # an unterminated string: the text was cut off
                break
            if depth == 0:
                try:
                    out.append(json.loads(lit.group()))
                except json.JSONDecodeError:
                    pass
            k += lit.end()
            continue
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            if depth == 0:
                break
            depth -= 1
        k += 1
    return tuple(out)


def judge_quotes(verdict) -> tuple[str, ...]:
    """The quotes a quote-monitor reading gave: ``Verdict.evidence``, or, when the verdict's
    boolean could not be parsed (so the readout dropped the list), the evidence list found in
    its generated text. Quotes are never dropped for a malformed verdict."""
    if verdict.evidence:
        return tuple(verdict.evidence)
    return evidence_list(verdict.text or "") if verdict.status == "parse_failure" else ()


__all__ = ["evidence_list", "judge_quotes"]
