"""The MBPP code cells: row parsing on rows written here, and a small build from the sources."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from calimon.data import mbpp
from calimon.data.codegen.runner import evaluate, proxy_passes
from calimon.data.paths import sources_dir
from calimon.errors import DataSourceError

ROW = {"task_id": 9001, "text": "Write a function to  count the even numbers in a list.",
       "code": "def count_even(nums):\r\n\tn = 0\r\n\tfor x in nums:  \r\n\t\tif x % 2 == 0:\r\n"
               "\t\t\tn += 1\r\n\treturn n",
       "test_setup_code": "",
       "test_list": ["assert count_even([1, 2, 4]) == 2", "assert count_even([]) == 0",
                     "assert count_even([3, 5, 6, 8, 10]) == 3"],
       "challenge_test_list": []}


def test_normalize_fixes_line_ends_tabs_and_trailing_blanks():
    code = mbpp.normalize(ROW["code"])
    assert "\r" not in code and "\t" not in code and code.endswith("return n\n")
    assert "    for x in nums:\n        if x % 2 == 0:\n            n += 1\n" in code


def test_two_visible_tests_and_one_held_back_without_challenge_tests():
    p = mbpp.to_problem(ROW)
    assert (p.pid, p.key, p.entry_point, p.params, p.style) == (
        "MBPP/9001", "mbpp-9001", "count_even", ("nums",), "direct")
    assert p.task == "Write a function to count the even numbers in a list."
    assert [t.display for t in p.visible] == ROW["test_list"][:2]
    assert [t.display for t in p.held] == ROW["test_list"][2:]
    assert p.visible[0].calls == ("([1, 2, 4], )",) and p.visible[0].eq_form
    assert p.visible_block() == "\n".join(ROW["test_list"][:2]) + "\n"
    res = evaluate(p, [p.reference, p.reference.replace("== 0", "== 1")])
    assert all(res.variants[0].tests) and not all(res.variants[1].tests)


def test_challenge_tests_are_held_back_when_present():
    row = dict(ROW, challenge_test_list=["assert count_even([0, -2, 7]) == 2"])
    p = mbpp.to_problem(row)
    assert [t.display for t in p.visible] == ROW["test_list"]
    assert [t.display for t in p.held] == row["challenge_test_list"]


@pytest.mark.parametrize("change,reason", [
    ({"test_list": ["assert helper(1) == 1"] * 3}, "tests call no function of the reference"),
    ({"test_list": ["x = count_even([1])", "assert count_even([]) == 0",
                    "assert count_even([2]) == 1"]}, "a test is not a single assert"),
    ({"code": "def count_even(nums, k=2):\n    return 0\n"},
     "signature with defaults or variable arguments"),
])
def test_rows_that_cannot_be_used_honestly_are_skipped(change, reason):
    assert mbpp.to_problem(dict(ROW, **change)) == reason


def sources_or_skip() -> Path:
    try:
        src = sources_dir()
    except DataSourceError as exc:
        pytest.skip(f"no ../shared/sources here: {exc}")
    if not (Path(src) / mbpp.SOURCE_REL).is_file():
        pytest.skip(f"{mbpp.SOURCE_REL} is not in {src}")
    return Path(src)


def test_a_small_build_from_the_sources_is_verified():
    src = sources_or_skip()
    samples, report, skipped = mbpp.mbpp_report(src, 0, limit=3)
    problems = {p.pid: p for p in mbpp.load_problems(src / mbpp.SOURCE_REL)[0]}
    assert report.spec_pairs >= 2 and report.syc_pairs >= 1
    for s in samples:
        assert s.source == "mbpp" and s.split is None
        if not s.label:
            continue
        p = problems[s.meta["problem"]]
        code = re.search(r"```python\n(.*?)```", s.response, re.S).group(1)
        if s.category == "spec_gaming":
            assert proxy_passes(p, code)
            assert not evaluate(p, [code]).variants[0].passes(
                range(len(p.visible), len(p.tests)))
    assert mbpp.mbpp_cells(src, 0, limit=1) == [s for s in samples
                                                if s.meta["problem"] == samples[0].meta["problem"]]


def test_an_altered_source_file_is_refused(tmp_path):
    src = sources_or_skip()
    (tmp_path / "mbpp").mkdir()
    data = (src / mbpp.SOURCE_REL).read_bytes()
    (tmp_path / mbpp.SOURCE_REL).write_bytes(data[:-1])
    with pytest.raises(DataSourceError, match="altered"):
        mbpp.mbpp_cells(tmp_path, 0, limit=1)
    with pytest.raises(DataSourceError, match="missing"):
        mbpp.mbpp_cells(tmp_path / "nowhere", 0)
