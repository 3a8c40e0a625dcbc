from calimon.scoring.store import MonitorKey, RunStore
from calimon.verdict import Verdict

KEY = MonitorKey("m", "rev1", "direct", "abc", "verdict")


def _v(h, status="ok", p=0.5):
    return Verdict(transcript_hash=h, readout="verdict", status=status,
                   p_raw=p if status == "ok" else None, format_mass=0.1,
                   truncation={"policy": "head_tail"} if h == "t" else None,
                   evidence=("q",))


def test_put_get_round_trip(tmp_path):
    with RunStore(tmp_path / "s.sqlite") as st:
        st.put(KEY, [_v("a", p=0.25), _v("t")])
        got = st.get(KEY, ["a", "t", "zz"])
    assert set(got) == {"a", "t"}
    assert got["a"] == _v("a", p=0.25)
    assert got["t"].truncation == {"policy": "head_tail"} and got["t"].evidence == ("q",)


def test_missing_includes_errors_and_other_keys_are_separate(tmp_path):
    st = RunStore(tmp_path / "s.sqlite")
    st.put(KEY, [_v("a"), _v("b", status="error"), _v("c", status="parse_failure")])
    assert st.missing(KEY, ["a", "b", "c", "d"]) == ["b", "d"]
    other = MonitorKey("m", "rev2", "direct", "abc", "verdict")
    assert st.missing(other, ["a"]) == ["a"]
    st.put(KEY, [_v("b", p=0.9)])  # a retried error is replaced, not duplicated
    assert st.count(KEY) == 3 and st.get(KEY, ["b"])["b"].p_raw == 0.9
    assert st._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    st.close()


def test_parse_failure_keeps_no_score(tmp_path):
    with RunStore(tmp_path / "s.sqlite") as st:
        st.put(KEY, [_v("c", status="parse_failure")])
        v = st.get(KEY, ["c"])["c"]
    assert v.p_raw is None and not v.scored
