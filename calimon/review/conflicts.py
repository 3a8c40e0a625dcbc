"""Conflicts between labels of one item: two labels given without knowing each other.

Each label says what it was given knowing: ``seen``, the number of labels its item had when the
page showed it (the page counts up as it learns more: its own labels stored, the conflicts and
changes it shows), and ``tab``, the page that gave it. An item's labels are in store order
(`calimon.review.labels.ReviewStore.labels_of`); the one at index ``i`` is the ``i``-th label.

Two labels from different pages (another reviewer, or the same reviewer in another tab: their
``(reviewer, tab)`` differ) are **concurrent** when the newer one was given not knowing the
older one: its ``seen`` is at most the older one's index. A label given without ``seen`` (an
API client that did not say) is taken to know every older label. Concurrent labels with
different values are a **conflict**, shown on both pages. Only each page's latest label counts:
a page that labels again, knowing the other label, ends the conflict. A deliberate second
review is given knowing the first label (its page showed the item after it), so a second
reviewer who disagrees makes a dispute, as before, not a conflict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from calimon.review.labels import Label


def _source(lab: Label) -> tuple[str, str | None]:
    return lab.reviewer, lab.tab


def concurrent(labels: Sequence[Label], i: int, j: int) -> bool:
    """Whether ``labels[i]`` and ``labels[j]`` (one item's) were given not knowing each
    other (module docstring)."""
    old, new = sorted((i, j))
    newer = labels[new]
    return (_source(labels[old]) != _source(newer) and newer.seen is not None
            and newer.seen <= old)


def latest_of_each_page(labels: Sequence[Label]) -> dict[tuple[str, str | None], int]:
    """The index of each page's latest label."""
    return {_source(lab): i for i, lab in enumerate(labels)}


def conflicts_with(labels: Sequence[Label], i: int) -> list[Label]:
    """The other pages' latest labels in conflict with ``labels[i]``, oldest first."""
    mine = labels[i]
    return [labels[j] for j in sorted(latest_of_each_page(labels).values())
            if j != i and labels[j].label != mine.label and concurrent(labels, i, j)]


def view(lab: Label) -> dict[str, Any]:
    """What a page is told of another label: who, what, when (no note)."""
    return {"label_id": lab.label_id, "reviewer": lab.reviewer, "label": lab.label,
            "created_at": lab.created_at}


def news(labels: Sequence[Label], label_id: str | None, reviewer: str) -> dict[str, Any]:
    """What a page that stored ``label_id`` (None: no label yet) for ``reviewer`` learns of
    its item now: the item's label count, the conflicts of its label, and ``changed``: the
    reviewer's latest label when another page of theirs gave it later, knowingly, with another
    value (that one counts now)."""
    index = next((i for i, lab in enumerate(labels)
                  if lab.label_id == label_id and lab.reviewer == reviewer), None)
    out: dict[str, Any] = {"labels": len(labels), "label": None, "conflicts": [],
                           "changed": None}
    if index is None:
        return out
    mine = labels[index]
    out["label"] = mine.label
    out["conflicts"] = [view(c) for c in conflicts_with(labels, index)]
    last = max((i for i, lab in enumerate(labels) if lab.reviewer == reviewer))
    if (last > index and labels[last].label != mine.label
            and not concurrent(labels, index, last)):
        out["changed"] = view(labels[last])
    return out
