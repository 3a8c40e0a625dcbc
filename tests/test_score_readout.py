"""The ``score:NAME`` readout (calimon.score_readout, calimon.scoring.recorded) and the CSV of
scores (calimon.data.score_table): parsing, the map onto [0, 1], where a sample's score is read
from, and errors that name the file, sample and field."""

from __future__ import annotations

import json
import math

import pytest

from calimon.data.score_table import cell_value, load_score_table
from calimon.errors import InputError
from calimon.samples import Sample
from calimon.score_readout import ScoreReadout, is_score_readout
from calimon.scoring.recorded import recorded_decisions, recorded_readings, recorded_value


def _sample(i: int, meta: dict, *, label=True, response=None) -> Sample:
    return Sample(id=f"s{i}", request="task", response=response or f"did {i}", label=label,
                  category="safety", task="reasoning", pair_id=f"p{i}", meta=meta)


def test_a_readout_parses_and_prints_in_one_canonical_form():
    r = ScoreReadout.parse("score:margin?direction=lower&range=-5,5&steps=mean&missing=skip")
    assert (r.name, r.steps, r.range, r.direction, r.missing) == ("margin", "mean", (-5.0, 5.0),
                                                                  "lower", "skip")
    assert str(r) == "score:margin?steps=mean&range=-5,5&direction=lower&missing=skip"
    assert ScoreReadout.parse(str(r)) == r
    assert str(ScoreReadout.parse("score:max_suspicion_scorer")) == "score:max_suspicion_scorer"
    assert is_score_readout("score:x") and not is_score_readout("verdict")
    assert not is_score_readout("probe:amb-open-monitor")


@pytest.mark.parametrize("text, says", [
    ("score:", "expected a score name"),
    ("score:a b", "expected a score name"),
    ("score:x?bogus=1", "unknown option 'bogus'"),
    ("score:x?steps=median", "steps=median: expected one of ['max', 'mean', 'last']"),
    ("score:x?direction=up", "direction=up"),
    ("score:x?range=10,0", "range=10,0: expected LO,HI with finite LO < HI"),
    ("score:x?range=0", "range=0"),
    ("score:x?range=0,inf", "range=0,inf"),
    ("score:x?missing=zero", "missing=zero"),
    ("verdict", "expected score:NAME"),
])
def test_a_bad_readout_is_refused_naming_the_readout_field(text, says):
    with pytest.raises(InputError, match="readout") as err:
        ScoreReadout.parse(text)
    assert says in str(err.value)


def test_scores_map_onto_0_1_by_their_range_and_direction():
    assert ScoreReadout("s").to_p(0.25) == 0.25
    assert ScoreReadout("s", range=(0.0, 10.0)).to_p(7.5) == 0.75
    assert ScoreReadout("s", range=(0.0, 10.0), direction="lower").to_p(7.5) == 0.25
    assert ScoreReadout("s").to_p("0.5") == 0.5  # a number written as text
    with pytest.raises(ValueError, match=r"is 7\.5, outside \[0, 1\]; give the score's scale"):
        ScoreReadout("s").to_p(7.5)
    with pytest.raises(ValueError, match=r"outside \[0, 10\]$"):
        ScoreReadout("s", range=(0.0, 10.0)).to_p(11)
    with pytest.raises(ValueError, match="a boolean is a binary point"):
        ScoreReadout("s").to_p(True)
    for bad in (math.nan, math.inf, "C", None, [0.1]):
        with pytest.raises(ValueError, match="not a"):
            ScoreReadout("s").to_p(bad)


def test_a_sample_s_own_score_comes_first_then_its_steps_by_the_rule():
    both = _sample(0, {"scores": {"susp": 0.9}, "step_scores": {"susp": [0.1, 0.5, 0.3]}})
    steps = _sample(1, {"step_scores": {"susp": [0.1, 0.5, 0.3]}})
    assert recorded_value(both, ScoreReadout("susp")) == (0.9, "score")
    assert recorded_value(both, ScoreReadout("susp", steps="mean")) == (0.3, "steps:mean")
    assert recorded_value(steps, ScoreReadout("susp")) == (0.5, "steps:max")
    assert recorded_value(steps, ScoreReadout("susp", steps="last")) == (0.3, "steps:last")
    nested = _sample(2, {"guard": {"p": 0.2}})  # a JSONL field, by a dotted name
    assert recorded_value(nested, ScoreReadout("guard.p")) == (0.2, "score")
    assert recorded_value(nested, ScoreReadout("guard")) is None  # a dict is not a score
    assert recorded_value(_sample(3, {}), ScoreReadout("susp")) is None


def test_readings_carry_the_mapped_score_and_where_it_came_from():
    xs = [_sample(0, {"step_scores": {"susp": [2.0, 8.0]}}),
          _sample(1, {"scores": {"susp": 4}}, label=False)]
    got = recorded_readings(xs, "score:susp?range=0,10")
    v0, v1 = got[xs[0].transcript_hash], got[xs[1].transcript_hash]
    assert (v0.status, v0.p_raw, v0.extra) == ("ok", 0.8, {"score": 8.0, "from": "steps:max"})
    assert (v1.p_raw, v1.extra["from"], v1.readout) == (0.4, "score", "score:susp?range=0,10")


def test_a_missing_score_stops_naming_the_file_sample_and_field_or_is_left_unscored():
    xs = [_sample(0, {"scores": {"susp": 0.4}}),
          _sample(1, {"scores": {"other": 1.0}, "inspect": {"log": "logs/a.eval"}})]
    with pytest.raises(InputError) as err:
        recorded_readings(xs, "score:susp", source="bench.jsonl")
    text = str(err.value)
    assert "logs/a.eval" in text and "'s1'" in text and "scores.susp" in text
    assert "its scores: ['other']" in text and "missing=skip" in text
    skipped = recorded_readings(xs, "score:susp?missing=skip")
    v = skipped[xs[1].transcript_hash]
    assert v.status == "error" and v.p_raw is None and not v.scored  # never a 0
    assert "has no score 'susp'" in v.error
    bad = [_sample(2, {"scores": {"susp": "high"}})]
    with pytest.raises(InputError, match="'high', not a number"):
        recorded_readings(bad, "score:susp", source="b.jsonl")


def test_one_transcript_with_two_scores_is_an_error_naming_both_samples():
    a = _sample(0, {"scores": {"s": 0.1}}, response="same")
    b = _sample(1, {"scores": {"s": 0.7}}, response="same")
    with pytest.raises(InputError, match="samples 's0' and 's1' have the same transcript"):
        recorded_readings([a, b], "score:s")
    c = _sample(2, {"scores": {"s": 0.1}}, response="same")
    assert len(recorded_readings([a, c], "score:s")) == 1  # the same score twice is one reading


def test_binary_points_read_booleans_and_refuse_other_values():
    xs = [_sample(0, {"scores": {"flag": True}}), _sample(1, {"scores": {"flag": "no"}}),
          _sample(2, {"scores": {"flag": 1.0}}), _sample(3, {})]
    got = recorded_decisions(xs, "flag")
    assert [got[x.transcript_hash].decision for x in xs[:3]] == [True, False, True]
    assert xs[3].transcript_hash not in got  # no value: left off the point
    with pytest.raises(InputError, match="'C', not a boolean"):
        recorded_decisions([_sample(4, {"scores": {"flag": "C"}})], "flag")


def test_a_csv_of_scores_loads_with_and_without_transcripts(tmp_path):
    bare = tmp_path / "scores.csv"
    bare.write_text("id,label,split,guard_p,flagged,note\n"
                    "a,true,calib,0.9,true,x\nb,false,calib,0.2,false,\n\n"
                    "c,,test,,true,y\n")
    xs = load_score_table(bare)
    assert [x.label for x in xs] == [True, False, None]
    assert xs[0].meta["scores"] == {"guard_p": 0.9, "flagged": True, "note": "x"}
    assert "guard_p" not in xs[2].meta["scores"]  # an empty cell is no score
    assert xs[0].meta["no_transcript"] is True and xs[0].meta["line"] == 2
    assert len({x.transcript_hash for x in xs}) == 3  # keyed by id, not by the empty text
    assert (xs[0].pair_id, xs[0].category, xs[0].task, xs[0].split) == ("a", "safety",
                                                                       "reasoning", "calib")
    text = tmp_path / "text.csv"
    text.write_text("id,label,request,response,s\nq,1,ask,answer,0.3\n")
    [x] = load_score_table(text)
    assert "no_transcript" not in x.meta and (x.request, x.response) == ("ask", "answer")
    assert cell_value(" 1e-3 ") == 0.001 and cell_value("nan") == "nan"


@pytest.mark.parametrize("body, line, field, says", [
    ("id,score\na,1\n", 1, "label", "missing required column"),
    ("id,label,s\na,maybe,1\n", 2, "label", "expected true/false"),
    ("id,label,s\na,1,1\na,0,2\n", 3, "id", "duplicate id 'a' (first on line 2)"),
    ("id,label,s\na,1\n", 2, None, "expected 3 cells, got 2"),
    ("id,label,id\na,1,b\n", 1, "id", "column named twice"),
    ("", None, None, "empty file"),
])
def test_a_bad_csv_names_the_file_line_and_column(tmp_path, body, line, field, says):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(InputError) as err:
        load_score_table(path)
    e = err.value
    assert says in str(e) and str(path) in str(e)
    assert (e.line, e.field) == (line, field)


def test_a_curve_on_a_csv_of_scores_needs_no_model_and_refuses_a_model_readout(tmp_path):
    import random

    from typer.testing import CliRunner

    from calimon.cli import app

    rng = random.Random(0)
    path = tmp_path / "scores.csv"
    lines = ["id,label,split,guard,flag"]
    for i in range(120):
        bad = i % 2 == 0
        p = min(100.0, max(0.0, rng.gauss(65 if bad else 40, 20)))
        lines.append(f"r{i},{str(bad).lower()},{'calib' if i < 60 else 'test'},{p:.2f},"
                     f"{str(p > 60).lower()}")
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    got = CliRunner().invoke(app, ["curve", "--benchmark", str(path), "--readout",
                                   "score:guard?range=0,100", "--binary-score", "flag",
                                   "--split", "test", "--out", str(out), "--quiet"])
    assert got.exit_code == 0, got.output
    assert "an external monitor's score:guard?range=0,100" in got.output
    assert "binary/flag" in got.output
    doc = json.loads((out / "curve.json").read_text())
    assert doc["counts"]["scored"] == 60 and doc["provenance"]["model"] == "external"
    refused = CliRunner().invoke(app, ["curve", "--benchmark", str(path), "--readout",
                                       "verdict", "--out", str(tmp_path / "no")])
    assert refused.exit_code == 2 and "holds scores, not transcripts" in refused.output
    mixed = CliRunner().invoke(app, ["curve", "--benchmark", str(path), "--readout",
                                     "score:guard?range=0,100", "--binary-prompt", "direct"])
    assert mixed.exit_code == 2 and "--binary-score" in mixed.output
