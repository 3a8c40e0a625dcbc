"""The benchmark registry builds humaneval-pairs on first use into $CALIMON_DATA_DIR."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from calimon.cli.data import data_app
from calimon.data import humaneval, registry
from calimon.errors import InputError


@pytest.fixture
def small_builds(monkeypatch, tmp_path):
    """Point the data dir at tmp_path and make the humaneval-pairs builder small and counted."""
    monkeypatch.setenv("CALIMON_DATA_DIR", str(tmp_path))
    calls = []
    original = humaneval.build

    def build(out_dir, *, sources=None, seed=0):
        calls.append(out_dir)
        return original(out_dir, sources=sources, seed=seed, limit=2)

    monkeypatch.setattr(humaneval, "build", build)
    return calls


def test_humaneval_pairs_is_registered_and_default():
    assert registry.BUILDERS["humaneval-pairs"] == "calimon.data.humaneval:build"
    from calimon.defaults import DEFAULT_BENCHMARK

    assert DEFAULT_BENCHMARK == "humaneval-pairs"
    assert "humaneval-pairs" in registry.AUTO_BUILD
    assert registry.builder("humaneval-pairs") is humaneval.build


def test_first_use_builds_into_the_data_dir_once(small_builds, tmp_path):
    samples = registry.load_benchmark("humaneval-pairs")
    target = tmp_path / "humaneval-pairs"
    assert small_builds == [target]
    assert (target / "samples.jsonl").is_file()
    manifest = registry.manifest("humaneval-pairs")
    assert manifest["n_samples"] == len(samples) > 0
    assert {s.category for s in samples} == {"spec_gaming", "sycophancy"}
    assert all(s.split for s in samples)
    again = registry.load_benchmark("humaneval-pairs")
    assert again == samples and len(small_builds) == 1
    by_path = registry.load_benchmark(str(target / "samples.jsonl"))
    assert by_path == samples


def test_unknown_and_unbuilt_benchmarks_say_what_to_do(small_builds):
    with pytest.raises(InputError, match="unknown benchmark"):
        registry.load_benchmark("no-such-bench")
    with pytest.raises(InputError, match="not built yet"):
        registry.load_benchmark("humaneval-pairs", build_if_missing=False)
    assert small_builds == []


@pytest.mark.slow
def test_full_auto_build(monkeypatch, tmp_path):
    monkeypatch.setenv("CALIMON_DATA_DIR", str(tmp_path))
    samples = registry.load_benchmark("humaneval-pairs")
    manifest = json.loads((tmp_path / "humaneval-pairs" / "manifest.json").read_text())
    assert len(samples) == manifest["n_samples"] >= 600


@pytest.fixture
def progress_builds(monkeypatch):
    """humaneval-pairs on 2 problems, recording the progress factory the CLI passed."""
    seen = []
    original = humaneval.build

    def build(out_dir, *, sources=None, seed=0, progress=None):
        seen.append(progress)
        return original(out_dir, sources=sources, seed=seed, limit=2, progress=progress)

    monkeypatch.setattr(humaneval, "build", build)
    return seen


def test_data_build_shows_progress_unless_quiet_or_json(progress_builds, tmp_path):
    runner = CliRunner()
    res = runner.invoke(data_app, ["build", "humaneval-pairs", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "humaneval-pairs: problems" in res.stderr and "2/2" in res.stderr  # one tick each
    assert res.stdout.startswith("built humaneval-pairs") and "problems" not in res.stdout
    res = runner.invoke(data_app, ["build", "humaneval-pairs", "--out", str(tmp_path / "b"),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    assert res.stderr == "" and res.stdout.startswith("built humaneval-pairs")
    res = runner.invoke(data_app, ["build", "humaneval-pairs", "--out", str(tmp_path / "c"),
                                   "--json"])
    assert res.exit_code == 0, res.output
    assert res.stderr == "" and json.loads(res.stdout)["name"] == "humaneval-pairs"
    assert progress_builds[0] is not None and progress_builds[1:] == [None, None]
    a, b = ((tmp_path / d / "samples.jsonl").read_bytes() for d in "ab")
    assert a == b  # progress changes nothing in the output


def test_data_build_passes_no_progress_to_a_builder_without_it(small_builds, tmp_path):
    res = CliRunner().invoke(data_app, ["build", "humaneval-pairs", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert small_builds == [tmp_path] and (tmp_path / "manifest.json").is_file()
