"""The label placer: first free spot next to the anchor, else the nearest free grid spot
with a leader line; never an overlap, never outside the bounds."""

from __future__ import annotations

import itertools

import pytest

from calimon.plotting.placement import Box, place_labels


def test_placer_keeps_the_first_free_spot_next_to_the_anchor():
    bounds = Box(0, 0, 200, 100)
    [p] = place_labels([(50, 50)], [(30, 10)], bounds=bounds, gap=4, pad=0)
    assert p == place_labels([(50, 50)], [(30, 10)], bounds=bounds, gap=4, pad=0)[0]
    assert (p.box, p.leader) == (Box(54, 54, 84, 64), False)  # above-right of the anchor
    # above-right leaves the bounds at the top edge: below-left is next
    [p] = place_labels([(50, 95)], [(30, 10)], bounds=bounds, gap=4, pad=0)
    assert (p.box, p.leader) == (Box(16, 81, 46, 91), False)


def test_placer_never_overlaps_and_stays_inside():
    bounds = Box(0, 0, 300, 200)
    anchors = [(5 + 6 * i, 195 - 4 * i) for i in range(8)]  # a tight cluster in a corner
    obstacles = [Box(x - 4, y - 4, x + 4, y + 4) for x, y in anchors] + [Box(0, 200, 300, 230)]
    placed = place_labels(anchors, [(40, 18)] * 8, bounds=bounds, obstacles=obstacles)
    boxes = [p.box for p in placed]
    assert all(b is not None and b.within(bounds) for b in boxes)
    for a, b in itertools.combinations(boxes + obstacles, 2):
        assert a in obstacles and b in obstacles or not a.overlaps(b)
    assert any(p.leader for p in placed)  # the crowded ones moved away, with a leader line


def test_placer_returns_no_box_when_there_is_no_room():
    bounds = Box(0, 0, 50, 20)
    placed = place_labels([(10, 10), (30, 10)], [(40, 15), (40, 15)], bounds=bounds)
    assert placed[0].box is not None and placed[1].box is None


def test_placer_refuses_mismatched_inputs():
    with pytest.raises(ValueError, match="one size per anchor"):
        place_labels([(0, 0)], [], bounds=Box(0, 0, 1, 1))
    with pytest.raises(ValueError, match="finite"):
        place_labels([(float("nan"), 0)], [(1, 1)], bounds=Box(0, 0, 1, 1))


def test_placer_on_random_crowds_never_overlaps():
    import numpy as np

    rng = np.random.default_rng(7)
    bounds = Box(0, 0, 400, 300)
    for _ in range(30):
        n = int(rng.integers(2, 12))
        anchors = [tuple(v) for v in rng.uniform(0, [400, 300], (n, 2))]
        sizes = [tuple(v) for v in rng.uniform([15, 8], [80, 25], (n, 2))]
        obstacles = [Box(x - 4, y - 4, x + 4, y + 4) for x, y in anchors]
        placed = place_labels(anchors, sizes, bounds=bounds, obstacles=obstacles)
        boxes = [p.box for p in placed if p.box is not None]
        assert len(boxes) == n  # plenty of room here: every label is placed
        for b, (w, h) in zip(boxes, sizes, strict=True):
            assert b.within(bounds) and abs(b.x1 - b.x0 - w) < 1e-9 and abs(b.y1 - b.y0 - h) < 1e-9
            assert not any(b.overlaps(o) for o in obstacles)
        assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
