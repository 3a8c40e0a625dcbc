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
