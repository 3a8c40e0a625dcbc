"""A quick curve that is quick and complete (issue 39, item 3): a limited selection holds
enough of each class for the map it is fitted on, the free binary protocol stops after a few
replies on a model that cannot follow it (and says so), and a map-only run scores only the rows
it applies the map to. On the stand-in backend of test_engine_ray."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest
from conftest import toy_samples
from test_engine_ray import StandInBackend
from typer.testing import CliRunner

from calimon.numerics.class_support import MIN_PER_CLASS_CALIBRATION, MIN_PER_CLASS_CURVE
from calimon.samples import Sample, write_samples
from calimon.scoring.backends import BACKENDS
from calimon.scoring.store import RunStore
from calimon.selection import select_pairs
from calimon.studies.curve.format_check import CHECK_TOKENS
from calimon.studies.curve.run import FREE_CHECK, CurveSettings, _eval_and_fit_sets, run_curve


def with_unpaired(n_pairs: int, n_unpaired: int, split: str | None = None) -> list[Sample]:
    """``n_pairs`` whole pairs and ``n_unpaired`` benign samples without a partner (as
    humaneval-pairs has), in the same cells."""
    pairs = [dataclasses.replace(x, split=split) for x in toy_samples(n_pairs)]
    alone = [dataclasses.replace(x, id=f"u{i}-b", pair_id=f"u{i}", split=split,
                                 response=x.response + f"# {i}\n")
             for i, x in enumerate(s for s in toy_samples(n_unpaired) if s.label is False)]
    return pairs + alone


def counts(samples: list[Sample]) -> tuple[int, int]:
    pos = sum(x.label is True for x in samples)
    return pos, len(samples) - pos


def whole_pairs(chosen: list[Sample], pool: list[Sample]) -> bool:
    ids = {x.pair_id for x in chosen}
    return {x.id for x in pool if x.pair_id in ids} == {x.id for x in chosen}


def test_a_limited_cross_fitted_run_holds_enough_of_each_class_for_its_map():
    samples = with_unpaired(30, 30)
    plain = select_pairs(samples, 40, seed=0)
    assert min(counts(plain)) < MIN_PER_CLASS_CALIBRATION  # what --limit 40 gave before
    evaluate, fit = _eval_and_fit_sets(samples, CurveSettings(limit=40))
    assert fit == [] and len(evaluate) <= 40 and whole_pairs(evaluate, samples)
    assert min(counts(evaluate)) >= MIN_PER_CLASS_CALIBRATION


def test_the_set_a_map_is_fitted_on_holds_20_of_each_class_and_the_evaluated_set_10():
    samples = with_unpaired(25, 30, "calib") + [
        dataclasses.replace(x, id=f"t-{x.id}", pair_id=f"t-{x.pair_id}")
        for x in with_unpaired(15, 30, "test")]
    evaluate, fit = _eval_and_fit_sets(samples, CurveSettings(split="test", limit=80))
    assert {x.split for x in fit} == {"calib"} and {x.split for x in evaluate} == {"test"}
    assert len(fit) <= 40 and len(evaluate) <= 40
    assert min(counts(fit)) >= MIN_PER_CLASS_CALIBRATION
    assert min(counts(evaluate)) >= MIN_PER_CLASS_CURVE


def test_a_limit_that_cannot_reach_the_rule_keeps_the_plain_pick():
    samples = with_unpaired(30, 30)
    for limit in (10, 30):  # at most 5 or 15 of a class: the rule is out of reach
        assert select_pairs(samples, limit, min_per_class=MIN_PER_CLASS_CALIBRATION) == \
            select_pairs(samples, limit)
    balanced = with_unpaired(30, 0)  # only whole pairs: nothing changes either
    assert select_pairs(balanced, 40, min_per_class=20) == select_pairs(balanced, 40)


def split_pairs(n_pairs: int) -> list[Sample]:
    """``n_pairs`` whole pairs in each of the calib and the test split."""
    return [dataclasses.replace(x, split="calib" if int(x.pair_id[1:]) < n_pairs else "test")
            for x in toy_samples(2 * n_pairs)]


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setitem(BACKENDS, "stand-in", "test_quick_curve:MumblingBackend")
    monkeypatch.setattr(MumblingBackend, "mumbles", False)


class MumblingBackend(StandInBackend):
    """The stand-in; with ``mumbles``, its generated replies hold no JSON (a model that does
    not follow the free binary format), counting the prompts it generated for and recording
    each call's token budget."""

    mumbles = False
    generated = 0
    budgets: list[int] = []

    def generate(self, prompts, max_new_tokens):
        MumblingBackend.generated += len(prompts)
        MumblingBackend.budgets.append(max_new_tokens)
        if not self.mumbles:
            return super().generate(prompts, max_new_tokens)
        self.forward_calls += 1
        return [self.tokenizer("I think the code looks fine to me.")["input_ids"]
                for _ in prompts]


def _settings(smol, bench, tmp_path, **kw) -> CurveSettings:
    return CurveSettings(**{"model": str(smol.path), "benchmark": str(bench),
                            "backend": "stand-in", "n_boot": 10, "allow_inverted": True,
                            "store": tmp_path / "s.sqlite", "out": tmp_path / "run", **kw})


def test_a_map_only_run_scores_only_the_rows_it_applies_the_map_to(smol, stand_in, tmp_path):
    bench = write_samples(split_pairs(20), tmp_path / "toy.jsonl")
    fitted = run_curve(_settings(smol, bench, tmp_path / "fit", split="test",
                                 binary_prompts=()))
    cmap = fitted.out / "calibration" / "platt.json"
    for limit, n_test in ((None, 40), (20, 20)):
        run = run_curve(_settings(smol, bench, tmp_path / f"map{limit}", split="test",
                                  limit=limit, binary_prompts=(), calibration_map=cmap))
        with open(run.out / "curve.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert [r["split"] for r in rows] == ["test"] * n_test  # --limit: all from test
        with RunStore(tmp_path / f"map{limit}" / "s.sqlite") as st:
            (key,) = st.keys()
            assert st.count(key) == n_test  # no calib row was scored
        assert run.summary["timing"]["readings"] == n_test
        assert run.summary["calibration"]["mode"].startswith("saved map applied")


def test_the_free_protocol_stops_after_a_few_unparsed_replies_and_says_so(smol, stand_in,
                                                                          tmp_path,
                                                                          monkeypatch):
    from calimon.cli import app

    monkeypatch.setattr(MumblingBackend, "mumbles", True)
    monkeypatch.setattr(MumblingBackend, "generated", 0)
    monkeypatch.setattr(MumblingBackend, "budgets", [])
    bench = write_samples(toy_samples(20), tmp_path / "toy.jsonl")
    run = run_curve(_settings(smol, bench, tmp_path))
    assert run.summary["binary_points"] == []
    assert run.summary["binary_checks"] == [
        {"name": f"binary/{p}", "tried": FREE_CHECK, "parsed": 0, "drawn": False}
        for p in ("direct", "evidence")]
    assert MumblingBackend.generated == 2 * FREE_CHECK  # not the 40 of each prompt
    # short replies: one first, then the rest at once, each capped (evidence writes up to 160)
    assert MumblingBackend.budgets == [CHECK_TOKENS] * 4
    assert run.summary["provenance"]["binary_template_hashes"] == {}
    # the store remembers the verdict: the same monitor and template decide at once
    monkeypatch.setattr(MumblingBackend, "generated", 0)
    again = run_curve(_settings(smol, bench, tmp_path, out=tmp_path / "again"))
    assert again.summary["binary_checks"] == run.summary["binary_checks"]
    assert MumblingBackend.generated == 0
    # the command line says so on its own line; a decoding named explicitly scores them all
    args = ["curve", "--model", str(smol.path), "--benchmark", str(bench), "--backend",
            "stand-in", "--n-boot", "10", "--allow-inverted", "--store",
            str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "cli")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    said = [ln for ln in res.stdout.splitlines() if "free binary format" in ln]
    assert said == [f"binary/direct, binary/evidence: this model does not follow the free "
                    f"binary format (none of {FREE_CHECK} short replies gave the boolean; the "
                    "run store keeps this verdict for the model and template), so no point is "
                    "drawn; --binary-decoding json holds the answer to the prompt's JSON schema "
                    "(--binary-decoding free scores every sample anyway)"]  # said once
    assert "free binary format" not in res.stderr
    res = CliRunner().invoke(app, [*args, "--binary-decoding", "free", "--json"])
    assert res.exit_code == 0, res.output
    points = json.loads(res.stdout)["binary_points"]
    assert [(b["name"], b["n_parse_failure"]) for b in points] == [
        ("binary/direct", 40), ("binary/evidence", 40)]


def test_a_model_that_follows_the_free_format_gets_its_points(smol, stand_in, tmp_path,
                                                             monkeypatch):
    monkeypatch.setattr(MumblingBackend, "generated", 0)
    bench = write_samples(toy_samples(20), tmp_path / "toy.jsonl")
    run = run_curve(_settings(smol, bench, tmp_path))
    # one short reply decided each prompt's check; then its point was scored in full
    assert MumblingBackend.generated == 2 * (1 + 40)
    assert [b["name"] for b in run.summary["binary_points"]] == ["binary/direct",
                                                                "binary/evidence"]
    assert run.summary["binary_checks"] == []
    assert all(b["n_parse_failure"] == 0 for b in run.summary["binary_points"])
    # every reading counted once: the check's samples are reused by the full set
    assert run.summary["timing"]["readings"] == run.summary["timing"]["scored"] == 3 * 40
