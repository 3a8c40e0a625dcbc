
import numpy as np
import pytest
import yaml
from conftest import ModelRefStub as _Ref

from calimon.errors import InputError
from calimon.scoring.probes.artifacts import (
    BaseModelRef,
    HeadCard,
    HeadMismatchError,
    PromptRef,
    TrainingRef,
    list_heads,
    load_head,
    save_head,
)
from calimon.scoring.probes.head import (
    ProbeHead,
    aggregate,
    balanced_weights,
    fit_logistic,
    fit_mlp,
)


def _data(n=300, d=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 20, size=d) + rng.normal(size=d)
    y = (X[:, 0] / X[:, 0].std() + 0.7 * rng.normal(size=n)) > 0.6
    return X, y


def _card(name="h", model="m", revision="r1", hidden=12):
    return HeadCard(version=1, name=name, kind="sequence", estimator="logistic", layer=3,
                    pooling="mean",
                    base_model=BaseModelRef(name=model, revision=revision, hidden_size=hidden,
                                            num_layers=30),
                    prompt=PromptRef(name="direct", template_hash="abc", max_input_tokens=1024),
                    training=TrainingRef(benchmark="toy", dataset_hash="x", split="train",
                                         n_samples=300, n_positive=90, categories=["safety"],
                                         seed=0),
                    metrics={"cv_auroc": 0.9}, weights_file="", weights_sha256="",
                    calimon_version="0", created="now")


def test_logistic_matches_scikit_learn_balanced():
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X, y = _data()
    params = fit_logistic(X, y, C=0.1)
    Z = StandardScaler().fit_transform(X)
    ref = LogisticRegression(C=0.1, class_weight="balanced", tol=1e-10, max_iter=10_000).fit(Z, y)
    assert np.allclose(params["coef"], ref.coef_[0], atol=1e-3)
    head = ProbeHead("sequence", "logistic", 3, params, pooling="mean")
    assert np.abs(head.predict_proba(X) - ref.predict_proba(Z)[:, 1]).max() < 1e-3


def test_balanced_weights_and_one_class_refused():
    w = balanced_weights(np.array([1, 0, 0, 0], bool))
    assert w.tolist() == [2.0, 2 / 3, 2 / 3, 2 / 3]
    with pytest.raises(InputError, match="both classes"):
        fit_logistic(np.zeros((3, 2)), np.zeros(3, bool))


def test_mlp_is_deterministic_and_learns():
    X, y = _data(200, 6)
    a, b = fit_mlp(X, y, epochs=100, seed=3), fit_mlp(X, y, epochs=100, seed=3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    p = ProbeHead("sequence", "mlp", 1, a, pooling="mean").predict_proba(X)
    assert p[y].mean() > p[~y].mean() + 0.2


def test_head_round_trips_through_safetensors_exactly(tmp_path):
    X, y = _data()
    head = ProbeHead("sequence", "logistic", 3, fit_logistic(X, y, C=0.5), pooling="mean")
    card_path = save_head(head, _card(), tmp_path)
    assert card_path == tmp_path / "m" / "h.card.yaml"
    assert (tmp_path / "m" / "h.safetensors").is_file()
    loaded, card = load_head(card_path)
    assert all(np.array_equal(loaded.params[k], head.params[k]) for k in head.params)
    assert np.array_equal(loaded.predict_proba(X), head.predict_proba(X))
    assert card.weights_sha256 == head.weights_hash() and card.layer == 3
    by_name, _ = load_head("h", model_ref=_Ref("m", "r1"), root=tmp_path)
    assert by_name.weights_hash() == head.weights_hash()
    assert [r["name"] for r in list_heads(root=tmp_path)] == ["h"]


def test_mismatched_base_model_or_shapes_refused(tmp_path):
    X, y = _data()
    head = ProbeHead("sequence", "logistic", 3, fit_logistic(X, y), pooling="mean")
    save_head(head, _card(), tmp_path)
    with pytest.raises(HeadMismatchError, match="trained on m revision r1"):
        load_head("h", model_ref=_Ref("m", "r2"), root=tmp_path)
    with pytest.raises(InputError, match="no head 'h' for model other"):
        load_head("h", model_ref=_Ref("other", "r1"), root=tmp_path)
    with pytest.raises(HeadMismatchError, match="hidden size 12, the model has 576"):
        load_head(tmp_path / "m" / "h.card.yaml", hidden_size=576)
    loaded, _ = load_head(tmp_path / "m" / "h.card.yaml")
    with pytest.raises(InputError, match=r"expected features of shape \(n, 12\)"):
        loaded.predict_proba(np.zeros((1, 5)))


def test_tampered_weights_or_card_refused(tmp_path):
    from safetensors.numpy import save_file

    X, y = _data()
    head = ProbeHead("sequence", "logistic", 3, fit_logistic(X, y), pooling="mean")
    card_path = save_head(head, _card(), tmp_path)
    params = dict(head.params)
    params["coef"] = params["coef"] * 2
    save_file(params, str(tmp_path / "m" / "h.safetensors"))
    with pytest.raises(HeadMismatchError, match="sha256"):
        load_head(card_path)
    save_file({**params, "coef": np.zeros(5)}, str(tmp_path / "m" / "h.safetensors"))
    with pytest.raises(HeadMismatchError, match="coef expects 5 inputs"):
        load_head(card_path)
    doc = yaml.safe_load(card_path.read_text())
    doc["surprise"] = 1
    card_path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="surprise"):
        load_head(card_path)


def test_head_validates_its_parts():
    X, y = _data(100, 4)
    p = fit_logistic(X, y)
    with pytest.raises(InputError, match="kind"):
        ProbeHead("paragraph", "logistic", 0, p)
    with pytest.raises(InputError, match="needs tensors"):
        ProbeHead("sequence", "mlp", 0, p)
    with pytest.raises(InputError, match="shape"):
        ProbeHead("sequence", "logistic", 0, p).predict_proba(np.zeros((2, 3)))
    with pytest.raises(InputError, match="head name"):
        save_head(ProbeHead("sequence", "logistic", 0, p), _card(name="../x"))


def test_aggregations():
    p = np.array([0.1, 0.9, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.0, 0.95])
    assert aggregate(p, "max") == 0.95
    assert aggregate(p, "mean") == pytest.approx(p.mean())
    assert aggregate(p, "top10pct") == pytest.approx((0.95 + 0.9) / 2)
    assert np.isnan(aggregate(np.array([]), "max"))
