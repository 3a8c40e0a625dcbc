"""The recipe search of `calimon heads train` (`calimon.studies.heads.recipe`): it finds the
pooling, the layer, the two layers or the non-linear head that the data supports, by
pair-grouped CV on the training rows, and chooses by the one-standard-error rule."""

import numpy as np
import pytest

from calimon.errors import InputError
from calimon.numerics.metrics import auroc
from calimon.samples import Sample
from calimon.scoring.probes.artifacts import (
    BaseModelRef,
    HeadCard,
    PromptRef,
    TrainingRef,
    load_head,
    save_head,
)
from calimon.scoring.probes.capture import POOLINGS
from calimon.scoring.probes.features import FeatureSet
from calimon.scoring.probes.head import ProbeHead, fit_mlp
from calimon.studies.heads.recipe import Candidate, Recipe, choose, search_recipe
from calimon.studies.heads.train import fit_sequence, fit_sequence_head, head_scores

H, LAYERS = 6, 3


def _features(signal, n_pairs=60, seed=0) -> FeatureSet:
    """Pairs of transcripts; ``signal(f, label, rng)`` writes the label into the pooled states
    ``f`` (pooling, layer, hidden) of one transcript."""
    rng = np.random.default_rng(seed)
    samples, pooled = [], []
    for k in range(n_pairs):
        for label in (True, False):
            samples.append(Sample(id=f"p{k}-{int(label)}", request=f"r{k}", response="x",
                                  label=label, category="safety", task="qa", pair_id=f"p{k}",
                                  split="train"))
            f = rng.normal(size=(len(POOLINGS), LAYERS + 1, H))
            signal(f, label, rng)
            pooled.append(f)
    n = len(samples)
    return FeatureSet(tuple(samples), np.array(pooled, np.float32), np.full((n, 4), 0.5),
                      np.full(n, 50), np.zeros(n, np.int8))


MAX = POOLINGS.index("max")


def _max_at_2(f, label, rng):
    f[MAX, 2, 0] += 2.0 if label else 0.0


def test_the_search_finds_max_pooling_at_the_layer_that_carries_the_label():
    fs, held = _features(_max_at_2), _features(_max_at_2, seed=1)
    fit, choice = fit_sequence(fs, estimators=("logistic",))
    assert choice.chosen == Recipe("logistic", (2,), "max")
    assert (fit.head.layer, fit.head.pooling, fit.head.layers) == (2, "max", ())
    labels = [c.recipe.label for c in choice.candidates]
    assert len([x for x in labels if x.count(" ") == 2 and "+" not in x]) == \
        len(POOLINGS) * (LAYERS + 1)  # every (layer, pooling) is a candidate
    assert "logistic 2 mean" in labels and any("+" in x for x in labels)  # two layers too
    assert auroc(head_scores(fit.head, held), held.y) > 0.85
    ref = choice.ref()
    assert ref.chosen == "logistic 2 max" and "one-standard-error" in ref.rule
    assert len(ref.candidates) == len(choice.candidates) and ref.n_splits == 5


def test_the_mlp_needs_enough_rows_to_be_a_candidate_unless_pinned():
    fs = _features(_max_at_2, 20)
    choice = search_recipe(fs, estimators=("logistic", "mlp"))
    assert {c.recipe.estimator for c in choice.candidates} == {"logistic"}


def test_many_layers_are_screened_every_other_one_then_beside_the_best():
    fs = FeatureSet(*_wide(_features(_max_at_2, 30)))
    choice = search_recipe(fs, poolings=("max",), estimators=("logistic",), concat=False)
    assert [c.recipe.layers[0] for c in choice.candidates] == [0, 2, 4, 6, 8, 1, 3]
    assert choice.chosen.layers == (2,)


def _wide(fs):
    """The same rows with 9 layers (0..8), the label still at layer 2."""
    rng = np.random.default_rng(5)
    pooled = rng.normal(size=(fs.pooled.shape[0], fs.pooled.shape[1], 9, H)).astype(np.float32)
    pooled[:, :, :LAYERS + 1] = fs.pooled
    return fs.samples, pooled, fs.verdict, fs.n_tokens, fs.truncated


def test_a_pinned_flag_leaves_only_the_candidates_it_allows():
    fs = _features(_max_at_2)
    _, choice = fit_sequence(fs, pooling="mean", estimators=("logistic",))
    assert {c.recipe.pooling for c in choice.candidates} == {"mean"}
    assert choice.pinned == {"pooling": "mean"}
    _, choice = fit_sequence(fs, layer=1, estimators=("logistic",))
    assert {c.recipe.layers for c in choice.candidates} == {(1,)}  # no second layer either
    fit, none = fit_sequence(fs, 2, "last", estimator="logistic")
    assert none is None and (fit.head.layer, fit.head.pooling) == (2, "last")


def _split_over_two_layers(f, label, rng):
    mean = POOLINGS.index("mean")
    f[mean, 0, 0] += 1.0 if label else 0.0
    f[mean, 3, 1] += 1.0 if label else 0.0


def test_two_layers_concatenated_read_what_each_holds_half_of():
    fs, held = _features(_split_over_two_layers, 120), _features(_split_over_two_layers, 60, 1)
    _, choice = fit_sequence(fs, estimators=("logistic",))
    cv = {c.recipe.label: c.cv_auroc for c in choice.candidates}
    both = cv.get("logistic 0+3 mean", cv.get("logistic 3+0 mean"))
    assert both is not None and both > max(cv["logistic 0 mean"], cv["logistic 3 mean"]) + 0.03
    assert choice.chosen.layers in ((0, 3), (3, 0))
    fit = fit_sequence_head(fs, choice.chosen.layers[0], "mean", layers=choice.chosen.layers)
    assert fit.head.layers == choice.chosen.layers and fit.head.input_size == 2 * H
    assert fit.head.hidden_size == H
    assert auroc(head_scores(fit.head, held), held.y) > auroc(
        head_scores(fit_sequence_head(fs, 3, "mean").head, held), held.y) + 0.03


def _xor(f, label, rng):
    """A weak line at layer 1 (so the MLP is tried there) and an XOR no line can read."""
    mean = POOLINGS.index("mean")
    a = rng.choice([-2.0, 2.0])
    f[mean, 1, 0] += a
    f[mean, 1, 1] += a if label else -a  # same sign: misbehaving; opposite: benign
    f[mean, 1, 2] += 0.6 if label else 0.0


@pytest.mark.slow  # about 10 MLP fits in CV
def test_the_mlp_is_chosen_only_where_cv_says_a_line_is_not_enough():
    choice = search_recipe(_features(_xor, 80), estimators=("logistic", "mlp"), mlp_min_rows=0)
    assert choice.chosen.estimator == "mlp"
    cv = {c.recipe.label: c.cv_auroc for c in choice.candidates}
    assert cv[choice.chosen.label] > 0.85 > max(v for k, v in cv.items() if k.startswith("log"))
    linear = _features(_max_at_2)
    choice = search_recipe(linear, estimators=("logistic", "mlp"), mlp_min_rows=0)
    assert any(c.recipe.estimator == "mlp" for c in choice.candidates)
    assert choice.chosen.estimator == "logistic"  # within one SE, the simpler head
    fit, choice = fit_sequence(_features(_max_at_2, 20), layer=2, pooling="max",
                               estimator="mlp")  # pinned: an MLP even on 40 rows
    assert fit.head.estimator == "mlp" and choice is None


def test_the_mlp_trains_deterministically_from_its_seed_and_saves_as_safetensors(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 12))
    y = X[:, 0] * X[:, 1] > 0
    a, b = fit_mlp(X, y, seed=3, epochs=50), fit_mlp(X, y, seed=3, epochs=50)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = fit_mlp(X, y, seed=4, epochs=50)
    assert not np.array_equal(a["w1"], c["w1"])
    head = ProbeHead("sequence", "mlp", 2, a, pooling="max")
    card = HeadCard(version=1, name="m", kind="sequence", estimator="mlp", layer=2,
                    pooling="max",
                    base_model=BaseModelRef(name="toy", revision="r", hidden_size=12,
                                            num_layers=4),
                    prompt=PromptRef(name="direct", template_hash="h", max_input_tokens=64),
                    training=TrainingRef(benchmark="toy", dataset_hash="d", split="train",
                                         n_samples=80, n_positive=int(y.sum()),
                                         categories=[], seed=3),
                    weights_file="", weights_sha256="", calimon_version="0", created="now")
    path = save_head(head, card, tmp_path)
    assert not list(tmp_path.rglob("*.pkl")) and path.with_name("m.safetensors").is_file()
    loaded, _ = load_head(path)
    assert np.array_equal(loaded.predict_proba(X), head.predict_proba(X))


def test_one_standard_error_rule_prefers_the_simpler_recipe_within_its_error():
    one = Recipe("logistic", (3,), "max")
    two = Recipe("logistic", (3, 7), "max")
    mlp = Recipe("mlp", (3,), "max")
    got, why = choose([Candidate(one, 0.80, 0.02), Candidate(two, 0.815, 0.02),
                       Candidate(mlp, 0.83, 0.02)])
    assert got == two and "within one SE" in why and "logistic 3+7 max" in why
    got, _ = choose([Candidate(one, 0.70, 0.02), Candidate(mlp, 0.83, 0.02)])
    assert got == mlp
    got, _ = choose([Candidate(one, float("nan"), float("nan")), Candidate(mlp, 0.6, 0.1)])
    assert got == mlp
    with pytest.raises(InputError, match="no candidate"):
        choose([Candidate(one, float("nan"), float("nan"))])


def test_weighted_rows_weigh_in_the_cv_figure_too():
    fs = _features(_max_at_2)
    w = np.where(np.arange(len(fs.samples)) < 20, 5.0, 1.0)
    _, choice = fit_sequence(fs, sample_weight=w, estimators=("logistic",))
    assert choice.chosen == Recipe("logistic", (2,), "max")
    with pytest.raises(InputError, match="attention needs per-token states"):
        search_recipe(fs, estimators=("attention",))


def test_a_head_on_two_layers_checks_its_layers():
    p = {"mean": np.zeros(2 * H), "scale": np.ones(2 * H), "coef": np.zeros(2 * H),
         "intercept": np.zeros(1)}
    with pytest.raises(InputError, match="first being its layer"):
        ProbeHead("sequence", "logistic", 2, p, pooling="mean", layers=(3, 2))
    with pytest.raises(InputError, match="hidden x layers"):
        ProbeHead("sequence", "logistic", 2, {**p, "mean": np.zeros(2 * H + 1),
                                              "scale": np.ones(2 * H + 1),
                                              "coef": np.zeros(2 * H + 1)},
                  pooling="mean", layers=(2, 3, 4))
    head = ProbeHead("sequence", "logistic", 2, p, pooling="max", layers=(2, 4))
    seen = []
    X = head.pooled_features(lambda k, how: seen.append((k, how)) or np.full((3, H), k))
    assert seen == [(2, "max"), (4, "max")] and X.shape == (3, 2 * H)
    assert X[0, 0] == 2 and X[0, H] == 4
