"""`calimon heads train --from-review`: reviewed labels trained on with the original data, a
stated weighting, a split by pair and by time, every label recorded on the card, and bad export
lines refused naming the file, the line and the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import toy_samples
from test_studies_backends import fakes, split_bench  # noqa: F401  (fakes: a fixture)
from typer.testing import CliRunner

from calimon.errors import InputError
from calimon.studies.heads.reviews import load_reviewed, review_weights, split_by_time


def _export_rows(n_pairs: int, first: int = 100) -> list[dict]:
    """Review-export lines (`calimon.serve.export`) of toy pairs t{first}..: pair k came in at
    time 1000 + k, its two transcripts reviewed by r{k % 3}."""
    rows = []
    for s in toy_samples(first + n_pairs)[2 * first:]:
        k = int(s.pair_id[1:]) - first
        d = s.to_dict() | {"split": "calib", "source": "serve:toy"}
        d["meta"] = {"reviewers": [f"r{k % 3}"], "received_at": f"2026-11-27T10:{k:02d}:00Z",
                     "decision_action": "review"}
        rows.append(d)
    return rows


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_bad_export_line_names_the_file_line_and_field(tmp_path):
    rows = _export_rows(3)
    cases = [("label", "yes", "label"), ("pair_id", None, "pair_id")]
    for key, value, field in cases:
        bad = [dict(r) for r in rows]
        if value is None:
            del bad[3][key]
        else:
            bad[3][key] = value
        with pytest.raises(InputError) as info:
            load_reviewed(_write(tmp_path / "x.jsonl", bad))
        e = info.value
        assert (e.line, e.field) == (4, field) and e.path.endswith("x.jsonl")
        assert f"x.jsonl:4: field '{field}'" in str(e)
    bad = [dict(r) for r in rows]
    bad[1] = {**bad[1], "meta": {"received_at": "t"}}
    with pytest.raises(InputError, match=r"x.jsonl:2: field 'reviewers'"):
        load_reviewed(_write(tmp_path / "x.jsonl", bad))
    (tmp_path / "y.jsonl").write_text(json.dumps(rows[0]) + "\n{not json\n")
    with pytest.raises(InputError, match=r"y.jsonl:2: not JSON"):
        load_reviewed(tmp_path / "y.jsonl")
    with pytest.raises(InputError, match=r"appears twice"):
        load_reviewed(_write(tmp_path / "z.jsonl", rows + rows[:1]))


def test_the_split_is_by_pair_and_by_time_and_never_reuses_a_transcript(tmp_path):
    rows = _export_rows(10)
    rows.reverse()  # file order is not time order
    labels = load_reviewed(_write(tmp_path / "r.jsonl", rows))
    original = [toy_samples(110)[-1]]  # pair t109's benign reply is also an original row
    train, held, dropped = split_by_time(labels, 0.3, original)
    tp, hp = {x.sample.pair_id for x in train}, {x.sample.pair_id for x in held}
    assert tp == {f"t{100 + k}" for k in range(7)} and hp == {"t107", "t108", "t109"}
    assert max(x.time for x in train) < min(x.time for x in held)
    assert dropped == 1 and len(held) == 5  # t109's benign reply: an original transcript
    assert all(x.sample.transcript_hash != original[0].transcript_hash for x in held)


def test_weights_give_the_reviews_their_stated_share_of_each_class():
    y0 = np.array([True] * 30 + [False] * 70)
    y1 = np.array([True] * 5 + [False] * 15)
    w = review_weights(y0, y1, 0.5)
    w0, w1 = w[:100], w[100:]
    for cls in (True, False):
        assert w1[y1 == cls].sum() == pytest.approx(0.5 * w0[y0 == cls].sum())
    assert w0[y0].sum() == pytest.approx(w0[~y0].sum())  # the original rows stay balanced
    with pytest.raises(InputError) as info:
        review_weights(y0, y1, 0)
    assert info.value.field == "review_weight"


def test_heads_train_from_review_records_every_label_and_its_figures(fakes, tmp_path,  # noqa: F811
                                                                     monkeypatch):
    from calimon.cli import app

    monkeypatch.setenv("CALIMON_FEATURES_DIR", str(tmp_path / "features"))
    bench = split_bench(tmp_path, 12, {f"t{i}": "train" for i in range(12)})
    export = _write(tmp_path / "reviews.jsonl", _export_rows(40))
    args = ["heads", "train", "--name", "rev", "--benchmark", bench, "--backend",
            "fake-hidden", "--max-input-tokens", "4096", "--no-eval", "--layer", "2",
            "--out", str(tmp_path / "heads"), "--json"]
    res = CliRunner().invoke(app, args + ["--from-review", export, "--review-weight", "2"])
    assert res.exit_code == 0, res.output
    card = json.loads(res.stdout)
    rev = card["training"]["reviews"]
    assert rev["weight"] == 2.0 and rev["eval_share"] == 0.3 and rev["file"] == export
    assert (rev["n_train"], rev["n_eval"]) == (56, 24)  # 28 pairs train, the latest 12 held out
    trained = [x for x in rev["labels"] if x["split"] == "train"]
    assert len(trained) == 56 and trained[0]["reviewers"] and trained[0]["time"]
    assert {x["id"] for x in trained} == {f"t{100 + k}-{e}" for k in range(28) for e in "mb"}
    assert card["metrics"]["review_eval_n"] == 24 and card["metrics"]["review_eval_auroc"] > 0.5
    assert card["training"]["n_samples"] == 24  # the original train split, recorded apart

    def fetched(url, out, **params):  # the server's export, as `calimon review-export` saves it
        assert url == "http://127.0.0.1:9/" and params == {"sample": "all"}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(open(export).read())
        return {"exported": 80}

    monkeypatch.setattr("calimon.serve.remote.export_to", fetched)
    res = CliRunner().invoke(app, args[:3] + ["url"] + args[4:]
                             + ["--from-review", "http://127.0.0.1:9/"])
    assert res.exit_code == 0, res.output
    rev = json.loads(res.stdout)["training"]["reviews"]
    assert rev["source"] == "http://127.0.0.1:9/" and rev["file"].endswith("url.reviews.jsonl")

    bad = _write(tmp_path / "bad.jsonl", _export_rows(3)[:2] + [{"id": "x"}])
    res = CliRunner().invoke(app, args + ["--from-review", bad])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "bad.jsonl:3: field 'request'" in lines[0]
