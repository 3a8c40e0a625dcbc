from __future__ import annotations

import numpy as np
import pytest

from calimon.deploy.io import (
    ScoredSet,
    calib_test_split,
    read_scored_csv,
    synthetic_scored,
    write_scored_csv,
    write_synthetic_run,
)
from calimon.errors import InputError

HEADER = "id,pair_id,label,category,task,split,status,p_raw,p_cal\n"


def write(tmp_path, body, header=HEADER):
    path = tmp_path / "curve.csv"
    path.write_text(header + body, encoding="utf-8")
    return path


def test_reads_rows_and_drops_unscored_rows_explicitly(tmp_path):
    path = write(tmp_path, "a,p1,1,safety,qa,calib,ok,0.9,0.8\n"
                           "b,p1,0,safety,qa,calib,truncated,0.2,0.1\n"
                           "c,p2,1,safety,qa,test,parse_failure,,\n"
                           "d,p2,0,safety,qa,test,error,,\n")
    s = read_scored_csv(path)
    assert s.ids.tolist() == ["a", "b"]
    assert s.dropped_ids == ("c", "d") and s.n_dropped == 2
    assert s.dropped_statuses == ("parse_failure", "error")
    assert s.labels.tolist() == [1, 0]
    np.testing.assert_allclose(s.scores, [0.8, 0.1])
    np.testing.assert_allclose(read_scored_csv(path, score="p_raw").scores, [0.9, 0.2])
    assert s.splits.tolist() == ["calib", "calib"]
    with pytest.raises(ValueError):
        s.scores[0] = 0.0  # read-only


@pytest.mark.parametrize("body, line, column", [
    ("a,p1,1,safety,qa,,ok,0.9,\n", 2, "p_cal"),
    ("a,p1,1,safety,qa,,ok,0.9,0.5\nb,p1,2,safety,qa,,ok,0.9,0.5\n", 3, "label"),
    ("a,p1,1,safety,qa,,ok,0.9,1.5\n", 2, "p_cal"),
    ("a,p1,1,safety,qa,,ok,x,0.5\n", 2, "p_raw"),
    ("a,p1,1,safety,qa,,,0.9,0.5\n", 2, "status"),
    ("a,p1,1,safety,qa,,ok,0.9,0.5\na,p1,0,safety,qa,,ok,0.9,0.5\n", 3, "id"),
    ("a,p1,,safety,qa,,ok,0.9,0.5\n", 2, "label"),
])
def test_errors_name_file_line_and_column(tmp_path, body, line, column):
    path = write(tmp_path, body)
    with pytest.raises(InputError) as err:
        read_scored_csv(path)
    assert err.value.line == line and err.value.field == column
    assert str(path) in str(err.value) and f":{line}" in str(err.value)


def test_missing_header_column_and_file(tmp_path):
    path = write(tmp_path, "a,ok\n", header="id,status\n")
    with pytest.raises(InputError, match="p_cal"):
        read_scored_csv(path)
    with pytest.raises(InputError, match="no such file"):
        read_scored_csv(tmp_path / "nope.csv")


def test_unlabelled_rows_allowed_when_labels_not_required(tmp_path):
    path = write(tmp_path, "a,0.7\nb,0.2\n", header="id,p_cal\n")
    with pytest.raises(InputError, match="status"):
        read_scored_csv(path, require_labels=False)
    path = write(tmp_path, "a,ok,0.7\nb,ok,0.2\n", header="id,status,p_cal\n")
    s = read_scored_csv(path, require_labels=False)
    assert s.labels.tolist() == [-1, -1] and not s.has_labels
    assert s.pair_ids.tolist() == ["a", "b"]
    with pytest.raises(InputError, match="label"):
        s.rates(0.5)


def test_round_trip_and_synthetic_run(tmp_path):
    s = synthetic_scored(50, seed=3)
    back = read_scored_csv(write_scored_csv(s, tmp_path / "x.csv"))
    np.testing.assert_array_equal(back.p_cal, s.p_cal)
    np.testing.assert_array_equal(back.p_raw, s.p_raw)
    assert back.labels.tolist() == s.labels.tolist()
    path = write_synthetic_run(tmp_path / "run", n_pairs=50, seed=3, n_failed=4)
    r = read_scored_csv(path)
    assert len(r) == 96 and r.n_dropped == 4


def test_rates_follow_flag_iff_score_at_least_threshold():
    s = ScoredSet.from_arrays([0.1, 0.5, 0.5, 0.9], [0, 0, 1, 1])
    assert s.rates(0.5) == (0.0, 0.5)
    assert s.rates(0.50001) == (0.5, 0.0)


def test_split_column_is_used_and_pair_split_never_straddles():
    s = synthetic_scored(200, seed=1)
    sp = calib_test_split(s)
    assert set(sp.calib.splits) == {"calib"} and set(sp.test.splits) == {"test"}
    u = synthetic_scored(200, seed=1, with_split=False)
    sp = calib_test_split(u, seed=5)
    assert "seed 5" in sp.method
    assert not set(sp.calib.pair_ids) & set(sp.test.pair_ids)
    assert len(sp.calib) + len(sp.test) == len(u)
    assert abs(len(sp.calib) - len(sp.test)) <= 6  # halves rounded up in each of 3 categories
    assert calib_test_split(u, seed=5).calib.ids.tolist() == sp.calib.ids.tolist()


def test_split_column_without_calib_rows_is_refused():
    s = ScoredSet.from_arrays([0.1, 0.9], [0, 1], splits=["test", "test"])
    with pytest.raises(InputError, match="calib"):
        calib_test_split(s)


def test_package_exports_resolve():
    import calimon.deploy as deploy

    for name in deploy.__all__:
        assert getattr(deploy, name) is not None
    with pytest.raises(AttributeError):
        deploy.no_such_name  # noqa: B018


def test_from_arrays_validates_and_switches_score():
    s = ScoredSet.from_arrays([0.2, 0.8], [False, True], pair_ids=[7, 7])
    assert s.labels.tolist() == [0, 1] and s.pair_ids.tolist() == ["7", "7"]
    with pytest.raises(InputError, match="labels"):
        ScoredSet.from_arrays([0.2, 0.8], [0.5, 1])
    with pytest.raises(InputError, match="categories"):
        ScoredSet.from_arrays([0.2, 0.8], [0, 1], categories=["safety"])
    with pytest.raises(InputError, match="p_raw"):
        s.with_score("p_raw")  # that column is empty here
    both = synthetic_scored(5, seed=0)
    assert both.with_score("p_raw").scores.tolist() == both.p_raw.tolist()
