import json

import numpy as np
import typer
from typer.testing import CliRunner

from calimon.cli.heads import register
from calimon.scoring.probes.artifacts import (
    BaseModelRef,
    HeadCard,
    PromptRef,
    TrainingRef,
    save_head,
)
from calimon.scoring.probes.head import ProbeHead, fit_logistic


def _app():
    app = typer.Typer()
    register(app)
    return app


def _save(root):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6))
    y = X[:, 0] > 0
    head = ProbeHead("sequence", "logistic", 4, fit_logistic(X, y), pooling="mean")
    card = HeadCard(version=1, name="demo", kind="sequence", estimator="logistic", layer=4,
                    pooling="mean",
                    base_model=BaseModelRef(name="smollm2-135m", revision="r", hidden_size=6,
                                            num_layers=30),
                    prompt=PromptRef(name="direct", template_hash="h", max_input_tokens=1024),
                    training=TrainingRef(benchmark="toy", dataset_hash="d", split="train",
                                         n_samples=40, n_positive=int(y.sum()),
                                         categories=["safety"], seed=0),
                    metrics={"cv_auroc": 0.91, "test_auroc": 0.88},
                    weights_file="", weights_sha256="", calimon_version="0", created="now")
    save_head(head, card, root)


def test_list_shows_heads_and_their_readout(tmp_path):
    _save(tmp_path)
    runner = CliRunner()
    res = runner.invoke(_app(), ["heads", "list", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "demo" in res.output and "probe:demo" in res.output and "0.880" in res.output
    res = runner.invoke(_app(), ["heads", "list", "--root", str(tmp_path), "--json"])
    rows = json.loads(res.output)
    assert rows[0]["name"] == "demo" and rows[0]["layer"] == 4
    res = runner.invoke(_app(), ["heads", "list", "--root", str(tmp_path / "none")])
    assert res.exit_code == 0 and "no heads" in res.output


def test_train_refuses_bad_arguments_in_one_line(tmp_path):
    runner = CliRunner()
    res = runner.invoke(_app(), ["heads", "train", "--name", "x", "--layer", "3", "--sweep",
                                 "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--layer or --sweep" in res.output
    res = runner.invoke(_app(), ["heads", "train", "--name", "../evil", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "head name" in res.output
    res = runner.invoke(_app(), ["heads", "train", "--name", "x", "--pooling", "median",
                                 "--out", str(tmp_path)])
    assert res.exit_code == 2 and "pooling" in res.output
