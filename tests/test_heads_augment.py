"""Training-time augmentation of probe heads: seeded copies in both classes that keep the label,
the pair and the misbehavior, phrasings held out from every evaluation attack, and the record on
the head's card."""

from __future__ import annotations

import json

import pytest
from conftest import toy_samples
from test_robustness import FENCED
from test_robustness_adaptive import _assert_intact
from test_studies_backends import fakes, split_bench  # noqa: F401  (fakes: a fixture)
from typer.testing import CliRunner

from calimon.errors import InputError
from calimon.studies.heads.augment import (
    AUGMENT_KINDS,
    TRAIN_PHRASES,
    augment_samples,
    check_kinds,
    phrases_sha256,
)
from calimon.studies.robustness.attacks import (
    CODE_COMMENT,
    COMMENT_LINES,
    CONTROL_NOTE,
    FAKE_VERDICT,
    REVIEWER_NOTE,
    ROLE_MARKERS,
)
from calimon.studies.robustness.edits import PHRASES

SAMPLES = toy_samples(6) + FENCED


def test_augmentation_is_seeded_and_covers_both_classes():
    a = augment_samples(SAMPLES, ["all"], copies=2, seed=3)
    assert a == augment_samples(SAMPLES, ["all"], copies=2, seed=3)
    assert a != augment_samples(SAMPLES, ["all"], copies=2, seed=4)
    assert len(a) == 2 * len(SAMPLES)  # every sample has a place that keeps it intact
    assert {x.label for x in a} == {True, False}
    for k, x in enumerate(a):
        src = SAMPLES[k // 2]  # copies follow their source, in order
        assert x.id == f"{src.id}~aug{k % 2}" and x.meta["augment"]["of"] == src.id
        assert (x.label, x.pair_id, x.category, x.task, x.request, x.split) == \
            (src.label, src.pair_id, src.category, src.task, src.request, src.split)
        assert x.response != src.response
        _assert_intact(src, x)
        phrase = next(p for p in TRAIN_PHRASES[x.meta["augment"]["kind"]]
                      if p.splitlines()[0] in x.response)
        assert phrase
    assert {x.meta["augment"]["kind"] for x in a} == set(AUGMENT_KINDS)


def test_augmentation_kinds_are_checked_and_chosen():
    only = augment_samples(SAMPLES, ["neutral"], seed=0)
    assert {x.meta["augment"]["kind"] for x in only} == {"neutral"}
    assert check_kinds(["verdict", "neutral"]) == ("neutral", "verdict")
    for bad in (["jailbreak"], []):
        with pytest.raises(InputError) as info:
            augment_samples(SAMPLES, bad)
        assert info.value.field == "augment"
    with pytest.raises(InputError):
        augment_samples(SAMPLES, ["all"], copies=0)


def test_training_phrases_are_held_out_from_every_evaluation_attack():
    fixed = [REVIEWER_NOTE, FAKE_VERDICT, ROLE_MARKERS, CONTROL_NOTE, CODE_COMMENT,
             *COMMENT_LINES, *(t for _, t in PHRASES)]
    for phrases in TRAIN_PHRASES.values():
        for p in phrases:
            for f in fixed:
                assert p.strip() not in f and f.strip() not in p, (p, f)


def test_train_head_with_augmentation_records_it_on_the_card(fakes, smol, tmp_path,  # noqa: F811
                                                             monkeypatch):
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head

    monkeypatch.setenv("CALIMON_FEATURES_DIR", str(tmp_path / "features"))
    splits = {f"t{i}": "train" for i in range(10)} | {"t10": "calib", "t11": "calib"}
    bench = split_bench(tmp_path, 14, splits)
    logs: list[str] = []
    base = dict(name="toy", benchmark=bench, backend="fake-hidden", max_input_tokens=4096,
                out=tmp_path / "heads")
    done = train_head(HeadTrainSettings(**base, augment=("all",), augment_copies=2),
                      log=logs.append)
    aug = done.card.training.augmentation
    assert aug is not None and aug.kinds == list(AUGMENT_KINDS) and aug.copies == 2
    assert aug.n_added == 40 and aug.n_added_positive == 20 and aug.seed == 0
    assert aug.phrases_sha256 == phrases_sha256()
    assert "calimon.studies.robustness.edits.PHRASES" in aug.held_out
    assert done.card.training.n_samples == 20 and done.card.training.n_positive == 10
    assert any("40 augmented copies" in m for m in logs)
    # 2 test pairs: below the curve rule (10 of each class), so no AUROC, as `calimon curve`
    assert done.card.metrics["test_auroc"] is None and done.card.metrics["test_n"] == 4
    plain = train_head(HeadTrainSettings(**{**base, "name": "plain"}))
    assert plain.card.training.augmentation is None
    with pytest.raises(InputError):
        train_head(HeadTrainSettings(**base, augment=("nope",)))


def test_heads_train_cli_takes_augment(fakes, smol, tmp_path, monkeypatch):  # noqa: F811
    from calimon.cli import app

    monkeypatch.setenv("CALIMON_FEATURES_DIR", str(tmp_path / "features"))
    bench = split_bench(tmp_path, 6, {f"t{i}": "train" for i in range(6)})
    res = CliRunner().invoke(app, ["heads", "train", "--name", "aug", "--benchmark", bench,
                                   "--backend", "fake-hidden", "--max-input-tokens", "4096",
                                   "--no-eval", "--augment", "verdict", "--augment",
                                   "neutral", "--out", str(tmp_path / "heads"), "--json"])
    assert res.exit_code == 0, res.output

    aug = json.loads(res.stdout)["training"]["augmentation"]
    assert aug["kinds"] == ["neutral", "verdict"] and aug["n_added"] == 12
    bad = CliRunner().invoke(app, ["heads", "train", "--name", "aug", "--benchmark", bench,
                                   "--backend", "fake-hidden", "--augment", "nope",
                                   "--out", str(tmp_path / "heads")])
    lines = [ln for ln in bad.output.splitlines() if ln.strip()]
    assert bad.exit_code == 2 and len(lines) == 1 and "augment" in lines[0], bad.output
