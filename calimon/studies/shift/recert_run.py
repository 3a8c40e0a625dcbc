"""``calimon recertify``: read reviewer labels and a policy's decisions, certify FAR / MR.

Label files: CSV with a header holding ``id`` and ``label``, or JSONL objects with the same
keys. A label is ``1``/``true``/``yes`` (misbehavior) or ``0``/``false``/``no`` (benign). Errors
name the file, the line and the field; reading never writes anything, so no decision or score
already on disk is touched.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from calimon.errors import InputError
from calimon.jsonio import json_error_where
from calimon.studies.shift.live import worst_label
from calimon.studies.shift.recertify import (
    RateCertificate,
    Stratum,
    audit_labels_needed,
    stratified_bounds,
)

_TRUE, _FALSE = {"1", "true", "yes"}, {"0", "false", "no"}


def _label(value: Any, path: str, line: int) -> int:
    text = str(value).strip().lower() if not isinstance(value, bool) else str(int(value))
    if text in _TRUE:
        return 1
    if text in _FALSE:
        return 0
    raise InputError(f"expected 1/0 (true/false, yes/no), got {value!r}", path=path, line=line,
                     field="label")


def _rows(path: Path, required: tuple[str, ...] = ("id", "label")):
    p = str(path)
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for line, text in enumerate(fh, 1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except ValueError as exc:
                    raise InputError(f"not valid JSON ({json_error_where(exc)})", path=p, line=line) from None
                if not isinstance(obj, dict):
                    raise InputError("expected a JSON object", path=p, line=line)
                yield line, obj
        return
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        for col in required:
            if col not in (reader.fieldnames or []):
                raise InputError(f"missing column {col!r} in the header", path=p, line=1,
                                 field=col)
        for row in reader:
            yield reader.line_num, row


def read_labels(path: str | Path) -> dict[str, int]:
    """Reviewer labels by transcript id (module doc); a repeated id must repeat its label."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    out: dict[str, int] = {}
    for line, row in _rows(path):
        rid = str(row.get("id", "") or "").strip()
        if not rid:
            raise InputError("must not be empty", path=str(path), line=line, field="id")
        if "label" not in row or row["label"] in (None, ""):
            raise InputError("missing label", path=str(path), line=line, field="label")
        y = _label(row["label"], str(path), line)
        if out.get(rid, y) != y:
            raise InputError(f"id {rid!r} is labelled both {out[rid]} and {y}", path=str(path),
                             line=line, field="label")
        out[rid] = y
    if not out:
        raise InputError("no labels in the file", path=str(path))
    return out


def read_decisions(path: str | Path) -> list[dict[str, Any]]:
    """Rows of an ``apply-policy`` decisions CSV: id, action, review (0/1), inclusion."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    out = []
    for line, row in _rows(path, ("id", "action", "review", "inclusion")):
        for col in ("id", "action", "review", "inclusion"):
            if row.get(col) in (None, ""):
                raise InputError("missing value (write decisions with `calimon apply-policy`)",
                                 path=str(path), line=line, field=col)
        try:
            inc = float(row["inclusion"])
        except ValueError:
            raise InputError(f"expected a probability, got {row['inclusion']!r}",
                             path=str(path), line=line, field="inclusion") from None
        out.append({"id": row["id"], "action": row["action"],
                    "review": row["review"].strip() == "1", "inclusion": inc, "line": line})
    return out


@dataclass(frozen=True)
class Recertification:
    """Certificates on new traffic from reviewed labels, and what the labels covered."""

    far: RateCertificate
    mr: RateCertificate
    strata: dict[str, Stratum]
    n_labels_used: int
    n_labels_ignored: int
    n_reviewed_unlabelled: int
    labels_needed: dict[str, int | None]

    def to_dict(self) -> dict[str, Any]:
        """Both certificates, the strata and the label counts as a JSON-ready dict."""
        return {"far": self.far.to_dict(), "mr": self.mr.to_dict(),
                "strata": {k: vars(v) for k, v in self.strata.items()},
                "n_labels_used": self.n_labels_used, "n_labels_ignored": self.n_labels_ignored,
                "n_reviewed_unlabelled": self.n_reviewed_unlabelled,
                "labels_needed": self.labels_needed}


def _strata(decisions, labels, worst: str) -> dict[str, Stratum]:
    """Strata with the reviewed-but-unlabelled rows imputed against ``worst`` ('far' or 'mr')."""
    acc: dict[str, list[int]] = {}
    inc: dict[str, float] = {}
    for d in decisions:
        a = acc.setdefault(d["action"], [0, 0, 0])
        inc[d["action"]] = d["inclusion"]
        a[0] += 1
        if d["review"]:
            a[1] += 1
            y = labels.get(d["id"])
            if y is None:  # the worst case for the bound asked for
                y = worst_label(d["action"], worst)
            a[2] += y == 0
    return {k: Stratum(k, v[0], v[1], v[2], inc[k]) for k, v in acc.items()}


def recertify_files(decisions_path: str | Path, labels_path: str | Path, *, delta: float = 0.05,
                    far_alpha: float | None = None,
                    mr_alpha: float | None = None) -> Recertification:
    """FAR / MR of a policy on the traffic it decided, from reviewer labels (module
    ``calimon.studies.shift.recertify``). Reviewed transcripts without a label are counted against the
    bound (worst case); labels of transcripts outside the review sample are ignored (using them
    would break the known inclusion probabilities) and counted."""
    decisions = read_decisions(decisions_path)
    labels = read_labels(labels_path)
    known = {d["id"] for d in decisions}
    unknown = [i for i in labels if i not in known]
    if unknown:
        raise InputError(f"{len(unknown)} labelled id(s) are not in the decisions "
                         f"{decisions_path} (first {unknown[0]!r})", path=str(labels_path),
                         field="id")
    reviewed = {d["id"] for d in decisions if d["review"]}
    far, _ = stratified_bounds(_strata(decisions, labels, "far"), delta, far_alpha, mr_alpha)
    _, mr = stratified_bounds(_strata(decisions, labels, "mr"), delta, far_alpha, mr_alpha)
    seen = {d["id"]: d for d in decisions if d["review"] and d["id"] in labels}
    observed = _strata(list(seen.values()), labels, "far")
    strata = {k: replace(s, size=sum(d["action"] == k for d in decisions))
              for k, s in observed.items()}
    est_far, _ = stratified_bounds(_complete(strata), delta)
    _, est_mr = stratified_bounds(_complete(strata), delta)
    need = {}
    for rate, alpha in (("far", far_alpha), ("mr", mr_alpha)):
        if alpha is not None:
            need[rate] = audit_labels_needed(_complete(strata), alpha, delta, rate)
    return Recertification(
        far=replace(far, estimate=est_far.estimate), mr=replace(mr, estimate=est_mr.estimate),
        strata=strata, n_labels_used=len(seen), n_labels_ignored=len(set(labels) - reviewed),
        n_reviewed_unlabelled=len(reviewed - set(labels)), labels_needed=need)


def _complete(strata: dict[str, Stratum]) -> dict[str, Stratum]:
    """The labelled view, with the review stratum scaled to its labelled part (for estimates)."""
    r = strata.get("human_review")
    if r is None:
        return strata
    return {**strata, "human_review": replace(r, size=r.labelled)}
