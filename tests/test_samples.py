"""The samples JSONL loader: every bad row stops with an error naming file, line and field."""

from __future__ import annotations

import json

import pytest

from calimon.errors import InputError
from calimon.samples import Sample, load_samples, sample_from_dict, write_samples

GOOD = {"id": "x-m", "request": "Add two numbers.", "response": "def add(a, b):\n    return 0\n",
        "label": True, "category": "spec_gaming", "task": "code", "pair_id": "x",
        "gold_spans": [[19, 27]], "source": "unit", "split": "test", "meta": {"k": 1}}


def write_rows(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def row(**changes):
    out = dict(GOOD, id=f"r{len(changes)}-{sorted(changes)}")
    for k, v in changes.items():
        if v is KeyError:
            out.pop(k)
        else:
            out[k] = v
    return out


CASES = [
    ("{not json", None, "not valid JSON"),
    (row(request=KeyError), "request", "missing required field"),
    (row(pair_id=KeyError), "pair_id", "missing required field"),
    (row(response=12), "response", "expected a string, got int"),
    (row(label="yes"), "label", "expected true, false or null"),
    (row(category="honesty"), "category", "'honesty'"),
    (row(task="poetry"), "task", "'poetry'"),
    (row(split="dev"), "split", "'dev'"),
    (row(gold_spans=[[19, 999]]), "gold_spans", "not a non-empty range"),
    (row(gold_spans=[[5, 5]]), "gold_spans", "not a non-empty range"),
    (row(gold_spans=[["a", 3]]), "gold_spans", "expected [start, end] integers"),
    (row(meta=[1]), "meta", "expected a JSON object"),
    (row(extra=1), "extra", "unknown field"),
    ("[1, 2]", None, "expected a JSON object"),
]


@pytest.mark.parametrize("bad,field,needle", CASES)
def test_a_bad_row_names_file_line_and_field(tmp_path, bad, field, needle):
    path = write_rows(tmp_path / "s.jsonl", [GOOD, "", bad])
    with pytest.raises(InputError) as err:
        load_samples(path)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), 3, field)
    message = str(err.value)
    assert message.startswith(f"{path}:3") and needle in message
    if field:
        assert f"field '{field}'" in message


def test_duplicate_id_names_both_lines(tmp_path):
    path = write_rows(tmp_path / "s.jsonl", [GOOD, dict(GOOD, pair_id="y"), GOOD])
    with pytest.raises(InputError) as err:
        load_samples(path)
    assert (err.value.line, err.value.field) == (2, "id")
    assert "first seen on line 1" in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(InputError) as err:
        load_samples(tmp_path / "nope.jsonl")
    assert err.value.path == str(tmp_path / "nope.jsonl")


def test_round_trip_is_byte_deterministic(tmp_path):
    samples = [sample_from_dict(GOOD), Sample(id="x-b", request=GOOD["request"],
                                              response="def add(a, b):\n    return a + b\n",
                                              label=False, category="spec_gaming", task="code",
                                              pair_id="x")]
    a = write_samples(samples, tmp_path / "a.jsonl").read_bytes()
    back = load_samples(tmp_path / "a.jsonl")
    assert back == samples and back[0].meta == {"k": 1}
    assert write_samples(back, tmp_path / "b.jsonl").read_bytes() == a
    assert back[0].response[19:27] == "return 0"


def test_line_numbers_count_newlines_only_and_crlf_files_load(tmp_path):
    from calimon.samples import load_samples

    good = json.dumps({"id": "a", "request": "q", "response": "r", "label": True,
                       "category": "safety", "task": "qa", "pair_id": "p"})
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes((good + "\r\n").encode())
    assert [x.id for x in load_samples(crlf)] == ["a"]
    lone_cr = tmp_path / "cr.jsonl"
    lone_cr.write_bytes(b"\r" + good.encode() + b"\n{bad\n")
    with pytest.raises(InputError) as err:
        load_samples(lone_cr)
    assert err.value.line == 2  # the \r does not start a new line
