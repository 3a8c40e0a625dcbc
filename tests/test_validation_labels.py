"""calimon.validation.as_labels: a 0/1 array is read at once, as the item-by-item check reads it;
anything else is still refused naming the item."""

from __future__ import annotations

import numpy as np
import pytest

from calimon.errors import InputError
from calimon.validation import as_labels


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.uint8, np.float64, np.float32])
def test_a_0_1_array_is_the_list_s_labels(dtype):
    values = [0, 1, 1, 0, 1]
    arr = np.array(values, dtype=dtype)
    assert as_labels(arr).tolist() == as_labels(values).tolist() == [False, True, True, False,
                                                                      True]
    assert as_labels(arr, dtype=np.int64).dtype == np.int64
    assert as_labels(arr, dtype=np.int64).tolist() == values


@pytest.mark.parametrize("bad, item", [([0, 2, 1], "item 1"), ([1.0, np.nan], "item 1"),
                                       ([0.5], "item 0"), ([-1, 0], "item 0")])
def test_other_numbers_are_refused_naming_the_item(bad, item):
    with pytest.raises(InputError, match=item):
        as_labels(np.array(bad))
