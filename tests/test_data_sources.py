"""Reading source rows, and the code-cell loader shared by humaneval and mbpp (no sandbox)."""

from __future__ import annotations

import gzip

import pytest

from calimon.data.codegen.loading import load_problems
from calimon.data.sources import read_jsonl
from calimon.errors import InputError


def test_read_jsonl_plain_and_gzip_skip_blank_lines(tmp_path):
    text = '{"a": 1}\n\n{"a": 2}\r\n'
    plain = tmp_path / "rows.jsonl"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "rows.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as fh:
        fh.write(text)
    assert read_jsonl(plain) == read_jsonl(packed) == [{"a": 1}, {"a": 2}]


def test_read_jsonl_names_the_bad_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\nnot json\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"rows.jsonl:3: not valid JSON") as err:
        read_jsonl(path)
    assert err.value.line == 3


def test_load_problems_keeps_order_and_counts_skip_reasons(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(f'{{"n": {n}}}\n' for n in (3, 1, 4, 1, 5, 9)), encoding="utf-8")

    def to_problem(row):  # a reason (str) or a problem (here a tuple)
        return ("odd" if row["n"] != 9 else "too big") if row["n"] % 2 else ("p", row["n"])

    problems, skipped = load_problems(path, to_problem)
    assert problems == [("p", 4)]
    assert list(skipped.items()) == [("odd", 4), ("too big", 1)]
