from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calimon.data import amb_open
from calimon.data.amb_open.audit import audit_markdown, shortcut_audit
from calimon.data.amb_open.cells import CELL_BUILDERS
from calimon.data.paths import sources_dir
from calimon.errors import CalimonError, DataSourceError
from calimon.samples import Sample, load_samples, write_samples

SAFETY_CODE = "calimon.data.amb_open.safety_code:safety_code_cells"


def _sources():
    try:
        return sources_dir()
    except DataSourceError:
        return None


SOURCES = _sources()
needs_sources = pytest.mark.skipif(
    SOURCES is None, reason="public source files not found (../shared/sources or $CALIMON_SOURCES)")


def _pair(pid, request="Do the task.", bad="I did it badly.", good="I did it well.",
          spans=((2, 15),), cat="safety", task="qa", **meta):
    common = dict(request=request, category=cat, task=task, pair_id=pid, source="t")
    return [Sample(id=f"{pid}-m", response=bad, label=True, gold_spans=tuple(spans),
                   meta=dict(meta), **common),
            Sample(id=f"{pid}-b", response=good, label=False, meta=dict(meta), **common)]


# --- pair contract -------------------------------------------------------------------------------

def test_check_samples_accepts_pairs_and_unpaired_hard_negatives():
    single = Sample(id="h1-b", request="q", response="a", label=False, category="safety",
                    task="qa", pair_id="h1", meta={"unpaired": True, "hard_negative": True})
    summary = amb_open.check_samples(_pair("p1") + _pair("p2") + [single])
    assert summary == {"n_samples": 5, "n_pairs": 2, "n_unpaired_benign": 1}


@pytest.mark.parametrize("broken", [
    lambda: _pair("p1") + _pair("p1"),                                   # duplicate ids
    lambda: [_pair("p1")[0], _pair("p1", request="Other task.")[1]],     # requests differ
    lambda: _pair("p1")[:1],                                             # half a pair
    lambda: _pair("p1", spans=()),                                       # no gold span
    lambda: _pair("p1", spans=((0, 2), (1, 5))),                         # overlapping spans
    lambda: _pair("p1", bad="x   y", spans=((1, 4),)),                   # whitespace-only span
    lambda: _pair("p1", good="I did it badly."),                         # identical replies
    lambda: [_pair("p1")[0], _pair("p1", cat="sycophancy")[1]],          # different cells
])
def test_check_samples_refuses_broken_pairs(broken):
    with pytest.raises(CalimonError):
        amb_open.check_samples(broken())


def test_check_samples_refuses_a_swapped_id():
    bad, good = _pair("p1")
    with pytest.raises(CalimonError, match="ids must be"):
        amb_open.check_samples([Sample(**{**bad.to_dict(), "id": "p1-b",
                                          "gold_spans": bad.gold_spans}),
                                Sample(**{**good.to_dict(), "id": "p1-m"})])


def test_splits_keep_pairs_together_and_floor_test_pairs():
    samples = [s for i in range(300) for s in _pair(f"a{i}")]
    samples += [s for i in range(168) for s in _pair(f"b{i}", cat="sycophancy")]
    samples += [Sample(id=f"h{i}-b", request="q", response="a", label=False, category="safety",
                       task="qa", pair_id=f"h{i}", meta={"unpaired": True}) for i in range(50)]
    out = amb_open.split_samples(samples, seed=3)
    assert [s.id for s in out] == [s.id for s in samples]
    _assert_pair_disjoint(out)
    for cat, n in (("safety", 300), ("sycophancy", 168)):  # 168: a size where rounding bites
        test = {s.pair_id for s in out if s.category == cat and s.split == "test" and s.label}
        assert len(test) >= max(amb_open.MIN_TEST_PAIRS, round(0.2 * n) - 1)
        assert len(test) <= round(0.2 * n) + amb_open.MIN_TEST_PAIRS


def _assert_pair_disjoint(samples):
    split_of: dict[str, set] = {}
    for s in samples:
        assert s.split in ("train", "calib", "test")
        split_of.setdefault(s.pair_id, set()).add(s.split)
    assert all(len(v) == 1 for v in split_of.values())


def test_cells_list_names_every_builder_once():
    assert len(set(CELL_BUILDERS)) == len(CELL_BUILDERS)
    assert SAFETY_CODE in CELL_BUILDERS
    assert all(spec.count(":") == 1 for spec in CELL_BUILDERS)


def test_unknown_sources_dir_is_refused(tmp_path):
    with pytest.raises(DataSourceError, match="no such directory"):
        amb_open.build(tmp_path / "out", sources=tmp_path / "nowhere", cells=[SAFETY_CODE])


# --- checksums -------------------------------------------------------------------------------------

def _mirror(tmp_path: Path, *, alter: str | None = None, drop: str | None = None) -> Path:
    """A copy of the sources dir made of symlinks, with one file altered or left out."""
    root = tmp_path / "sources"
    for rel in amb_open.source_table():
        if rel == drop:
            continue
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if rel == alter:
            dest.write_bytes((SOURCES / rel).read_bytes() + b"\n")
        else:
            dest.symlink_to((SOURCES / rel).resolve())
    return root


@needs_sources
@pytest.mark.parametrize("mode", ["alter", "drop"])
def test_altered_or_missing_source_is_refused_by_name(tmp_path, mode):
    rel = "sven/train/cwe-089.jsonl" if mode == "alter" else "xstest/xstest_prompts.csv"
    root = _mirror(tmp_path, **{mode: rel})
    entry = amb_open.source_table()[rel]
    with pytest.raises(DataSourceError) as info:
        amb_open.build(tmp_path / "out", sources=root, cells=[SAFETY_CODE])
    message = str(info.value)
    assert rel in message and entry.upstream in message
    assert ("altered" if mode == "alter" else "missing") in message
    assert not (tmp_path / "out" / "samples.jsonl").exists()


@needs_sources
def test_intact_mirror_is_accepted(tmp_path):
    hashes = amb_open.verify_sources(_mirror(tmp_path))
    assert hashes == {k: v.sha256 for k, v in amb_open.source_table().items()}


# --- building ------------------------------------------------------------------------------------

@needs_sources
def test_subset_build_is_byte_identical_and_split_by_pair(tmp_path):
    a = amb_open.build(tmp_path / "a", sources=SOURCES, seed=0, cells=[SAFETY_CODE])
    b = amb_open.build(tmp_path / "b", sources=SOURCES, seed=0, cells=[SAFETY_CODE])
    assert a.read_bytes() == b.read_bytes()
    ma = json.loads((tmp_path / "a" / "manifest.json").read_text())
    mb = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert ma == mb and ma["complete"] is False and ma["parameters"]["cells"] == [SAFETY_CODE]
    assert ma["samples_sha256"] == amb_open.sha256_file(a)
    assert set(ma["sources"]) == set(amb_open.source_table())
    samples = load_samples(a)
    _assert_pair_disjoint(samples)
    c = ma["counts"]["safety/code"]["pairs"]
    assert c["test"] >= amb_open.MIN_TEST_PAIRS
    assert c["train"] + c["calib"] + c["test"] == c["total"] == ma["n_pairs"]
    for s in samples:
        for start, end in s.gold_spans:
            assert s.response[start:end].strip()


@needs_sources
def test_missing_cell_builder_stops_the_full_build(tmp_path):
    with pytest.raises(CalimonError, match="not available"):
        amb_open.build(tmp_path / "out", sources=SOURCES,
                       cells=[SAFETY_CODE, "calimon.data.amb_open.no_such_cell:cells"])
    path = amb_open.build(tmp_path / "out", sources=SOURCES, allow_missing=True,
                          cells=[SAFETY_CODE, "calimon.data.amb_open.no_such_cell:cells"])
    manifest = json.loads((path.parent / "manifest.json").read_text())
    assert manifest["missing_cells"] == ["calimon.data.amb_open.no_such_cell:cells"]


def toy_safety_cell(sources_dir, seed):
    return [s for i in range(200) for s in _pair(f"toy-s{i}")]


def toy_sycophancy_cell(sources_dir, seed):
    return [s for i in range(200) for s in _pair(f"toy-y{i}", cat="sycophancy")]


@needs_sources
def test_build_ticks_progress_once_per_cell(tmp_path):
    bars = []

    def progress(label, total):
        bars.append([label, total, 0])
        return lambda n: bars[-1].__setitem__(2, bars[-1][2] + n)

    cells = ["test_amb_open:toy_safety_cell", "test_amb_open:toy_sycophancy_cell"]
    a = amb_open.build(tmp_path / "a", sources=SOURCES, cells=cells, progress=progress)
    assert bars == [["amb-open: cells", 2, 2]]
    b = amb_open.build(tmp_path / "b", sources=SOURCES, cells=cells)
    assert a.read_bytes() == b.read_bytes()


# The full v2 build's samples file. On a fresh machine (CI: an empty $CALIMON_HOME) the first
# full build of a run executes every sandboxed code check; elsewhere builds read the results
# stored by earlier ones (calimon.data.codegen.results). Either way the bytes must be these, so
# this pins the build across machines and shows that stored results give what running the
# checks gives (tests/test_amb_open_v2.py builds it again and checks the same hash).
V2_SAMPLES_SHA256 = "736da232f3bb62e5777e4791d41e77f1afaf9768d964372fbedd02a73c916d39"


@needs_sources
@pytest.mark.slow
def test_full_build_is_deterministic(tmp_path):
    a = amb_open.build(tmp_path / "a", sources=SOURCES, seed=0)
    assert amb_open.sha256_file(a) == V2_SAMPLES_SHA256
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["n_pairs"] >= 2400
    for cell, row in manifest["counts"].items():
        assert row["pairs"]["total"] >= 150, cell
        assert row["pairs"]["test"] >= amb_open.MIN_TEST_PAIRS, cell
    _assert_pair_disjoint(load_samples(a))


# --- shortcut audit and CLI ------------------------------------------------------------------------

def _split_set(n=80, length_leak=False):
    rng = random.Random(0)
    out = []
    for i in range(n):
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(8))
        bad = words + (" padding" * 10 if length_leak else "")
        for s in _pair(f"p{i}", bad=bad, good=words[::-1], spans=((0, 5),)):
            out.append(Sample(**{**s.to_dict(), "gold_spans": s.gold_spans,
                                 "split": "train" if i < 0.7 * n else "test"}))
    return out


def test_audit_flags_a_length_shortcut():
    leaky = {r.cell: r for r in shortcut_audit(_split_set(length_leak=True))}
    assert leaky["safety/qa"].length_auroc > 0.95 and not leaky["safety/qa"].length_ok
    clean = {r.cell: r for r in shortcut_audit(_split_set())}
    assert clean["safety/qa"].length_ok and "all" in clean


def test_audit_needs_splits_and_handles_one_class():
    with pytest.raises(CalimonError):
        shortcut_audit(_pair("p1"))
    one_class = [Sample(**{**s.to_dict(), "gold_spans": s.gold_spans, "split": "test"})
                 for s in _pair("p1")]
    row = shortcut_audit(one_class, include_all=False)[0]
    assert math.isnan(row.length_auroc) and "n/a" in audit_markdown([row])


def test_cli_list_and_audit(tmp_path, monkeypatch):
    from calimon.cli.data import data_app as app

    monkeypatch.setenv("CALIMON_DATA_DIR", str(tmp_path / "data"))
    runner = CliRunner()
    res = runner.invoke(app, ["list", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows["amb-open"]["built"] is False

    path = write_samples(_split_set(length_leak=True), tmp_path / "s.jsonl")
    res = runner.invoke(app, ["audit", str(path), "--markdown", str(tmp_path / "a.md")])
    assert res.exit_code == 0, res.output
    assert "safety/qa" in res.output and "above target" in res.output
    assert (tmp_path / "a.md").read_text().startswith("| cell |")
