"""The attention-pooled probe: it finds one informative token that mean pooling averages away,
is deterministic, scores samples without tokens as NaN and refuses one-class data."""

from __future__ import annotations

import numpy as np
import pytest

from calimon.errors import InputError
from calimon.numerics.metrics import auroc
from calimon.scoring.probes.attention import attention_scores, fit_attention_probe
from calimon.scoring.probes.head import ProbeHead, fit_logistic


def marked_token_data(n: int, seed: int, tokens: int = 40, d: int = 12):
    """Every sample has one marked token (feature 1 high); only that token's feature 0 carries
    the label, so the mean over tokens dilutes the signal by the sample's length."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2 == 0
    states = []
    for label in y:
        H = rng.normal(size=(tokens, d)).astype(np.float16)
        t = rng.integers(tokens)
        H[t, 1] = 6.0
        H[t, 0] = 2.5 if label else -2.5
        states.append(H)
    return states, y


def test_attention_pooling_reads_the_token_that_mean_pooling_dilutes():
    train, y_train = marked_token_data(300, seed=0)
    test, y_test = marked_token_data(200, seed=1)
    params = fit_attention_probe(train, y_train, epochs=30, seed=0)
    att = auroc(attention_scores(params, test), y_test)
    mean_head = ProbeHead("sequence", "logistic", 0,
                          fit_logistic(np.stack([H.astype(float).mean(0) for H in train]),
                                       y_train, C=1.0), pooling="mean")
    mean = auroc(mean_head.predict_proba(np.stack([H.astype(float).mean(0) for H in test])),
                 y_test)
    assert att > 0.9
    assert att > mean + 0.2


def test_fit_is_deterministic_and_params_are_plain_arrays():
    states, y = marked_token_data(60, seed=2)
    a = fit_attention_probe(states, y, epochs=3, seed=5)
    b = fit_attention_probe(states, y, epochs=3, seed=5)
    assert set(a) == {"mean", "scale", "query", "value", "intercept"}
    for k in a:
        assert isinstance(a[k], np.ndarray)
        np.testing.assert_array_equal(a[k], b[k])


def test_a_sample_without_tokens_is_nan_and_left_out_of_the_fit():
    states, y = marked_token_data(40, seed=3)
    empty = np.zeros((0, states[0].shape[1]), dtype=np.float16)
    params = fit_attention_probe([*states, empty], np.r_[y, True], epochs=2)
    p = attention_scores(params, [states[0], empty])
    assert np.isfinite(p[0]) and 0 < p[0] < 1
    assert np.isnan(p[1])


def test_one_class_or_mismatched_labels_are_refused():
    states, y = marked_token_data(10, seed=4)
    with pytest.raises(InputError, match="both classes"):
        fit_attention_probe(states, np.ones(10, dtype=bool))
    with pytest.raises(InputError, match="one label per sample"):
        fit_attention_probe(states, y[:5])


def _head(d: int = 12, seed: int = 0) -> ProbeHead:
    states, y = marked_token_data(60, seed=seed, d=d)
    return ProbeHead("sequence", "attention", 3, fit_attention_probe(states, y, epochs=3),
                     pooling="attention")


def test_an_attention_head_scores_token_states_and_nothing_else():
    head = _head()
    states, _ = marked_token_data(8, seed=9)
    np.testing.assert_array_equal(head.score_states(states),
                                  attention_scores(head.params, states))
    assert head.reads_tokens and head.hidden_size == 12
    with pytest.raises(InputError, match="use score_states"):
        head.predict_proba(np.zeros((2, 12)))
    with pytest.raises(InputError, match=r"\(tokens, 12\)"):
        head.score_states([np.zeros((4, 5))])
    with pytest.raises(InputError, match="is a sequence head"):
        ProbeHead("token", "attention", 3, head.params)
    with pytest.raises(InputError, match="needs tensors"):
        ProbeHead("sequence", "attention", 3, {k: head.params[k] for k in ("mean", "scale")})
    plain = ProbeHead("sequence", "logistic", 3, fit_logistic(np.eye(12), np.arange(12) % 2 == 0),
                      pooling="mean")
    assert not plain.reads_tokens
    with pytest.raises(InputError, match="for attention heads"):
        plain.score_states(states)


def test_an_attention_head_round_trips_through_safetensors(tmp_path):
    from conftest import ModelRefStub

    from calimon.scoring.probes.artifacts import (
        BaseModelRef,
        HeadCard,
        PromptRef,
        TrainingRef,
        load_head,
        save_head,
    )

    head = _head()
    card = HeadCard(version=1, name="att", kind="sequence", estimator="attention", layer=3,
                    pooling="attention",
                    base_model=BaseModelRef(name="m", revision="r1", hidden_size=12,
                                            num_layers=30),
                    prompt=PromptRef(name="direct", template_hash="abc", max_input_tokens=1024),
                    training=TrainingRef(benchmark="toy", dataset_hash="x", split="train",
                                         n_samples=60, n_positive=30, categories=["safety"],
                                         seed=0),
                    weights_file="", weights_sha256="", calimon_version="0", created="now")
    path = save_head(head, card, tmp_path)
    assert (tmp_path / "m" / "att.safetensors").is_file()
    loaded, saved = load_head(path, model_ref=ModelRefStub("m", "r1"), hidden_size=12)
    assert saved.estimator == "attention" and saved.pooling == "attention"
    assert loaded.weights_hash() == head.weights_hash() == saved.weights_sha256
    states, _ = marked_token_data(5, seed=7)
    np.testing.assert_array_equal(loaded.score_states(states), head.score_states(states))
