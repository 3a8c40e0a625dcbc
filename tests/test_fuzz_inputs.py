"""Property-based fuzzing of every input file calimon reads: samples JSONL, YAML configs (model,
prompt, policy) and the CLI. Never a traceback: a CalimonError naming the file, the line where
there is one, and the field."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from calimon.config import configs_root, load_yaml_model
from calimon.deploy.policy_file import Policy, load_policy
from calimon.errors import CalimonError, ConfigError, InputError
from calimon.models import ModelConfig
from calimon.prompts import PromptTemplate
from calimon.samples import KNOWN, Sample, load_samples, write_samples

FUZZ = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# Any Unicode text, lone surrogates included (valid JSON escapes, invalid UTF-8 text).
any_text = st.text(alphabet=st.characters(codec=None, categories=None), max_size=12)
scalars = (st.none() | st.booleans() | st.integers(min_value=-10**300, max_value=10**300)
           | st.floats(allow_nan=True, allow_infinity=True) | any_text)
json_values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(any_text, kids, max_size=3), max_leaves=8)

VALID = {"id": "x-1", "request": "Write f.", "response": "def f():\n    return 1\n",
         "label": True, "category": "spec_gaming", "task": "code", "pair_id": "x",
         "gold_spans": [[9, 22]], "source": "unit", "split": "test", "meta": {"k": 1}}


def _tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="calimon-fuzz-"))


def assert_one_line_error(exc: BaseException, path: Path) -> None:
    assert isinstance(exc, CalimonError), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert str(path) in text and "\n" not in text and len(text) < 2000


def _load(path: Path) -> list[Sample] | CalimonError:
    try:
        return load_samples(path)
    except CalimonError as exc:
        return exc


# ----------------------------------------------------------------------------- samples JSONL

@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_give_samples_or_a_located_error(data):
    path = _tmpdir() / "bytes.jsonl"
    path.write_bytes(data)
    got = _load(path)
    if isinstance(got, CalimonError):
        assert_one_line_error(got, path)
        assert got.line is None or 1 <= got.line <= data.count(b"\n") + 1


@FUZZ
@given(st.lists(json_values, min_size=1, max_size=4))
def test_random_json_rows_point_at_the_first_bad_line(rows):
    folder = _tmpdir()
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    got = _load(path)
    if isinstance(got, CalimonError):
        assert_one_line_error(got, path)
        assert isinstance(got, InputError) and got.line is not None and 1 <= got.line <= len(rows)
        # Everything before the reported line loads: the error names the FIRST bad line.
        head = folder / "head.jsonl"
        head.write_text("".join(json.dumps(r) + "\n" for r in rows[:got.line - 1]))
        assert not isinstance(_load(head), CalimonError)


@FUZZ
@given(st.sampled_from(sorted(KNOWN)), json_values)
def test_one_bad_field_is_named_with_file_and_line(field, value):
    row = {**VALID, field: value}
    path = _tmpdir() / "one.jsonl"
    path.write_text(json.dumps({**VALID, "id": "ok-0"}) + "\n" + json.dumps(row) + "\n")
    got = _load(path)
    if isinstance(got, CalimonError):
        assert_one_line_error(got, path)
        assert got.line == 2
        # A new response can invalidate the spans; a new id can collide with line 1.
        assert got.field == field or (field == "response" and got.field == "gold_spans")
    else:  # accepted: it must survive a write / read round trip unchanged
        again = load_samples(write_samples(got, path.with_name("again.jsonl")))
        assert again == got and [x.meta for x in again] == [x.meta for x in got] \
            or field == "meta"  # NaN in meta is not equal to itself


@FUZZ
@given(st.text(max_size=8), json_values)
def test_unknown_fields_are_named(key, value):
    assume(key not in KNOWN)
    path = _tmpdir() / "extra.jsonl"
    path.write_text(json.dumps({**VALID, key: value}) + "\n")
    got = _load(path)
    assert isinstance(got, InputError) and got.field == key and got.line == 1


text_no_surrogates = st.text(max_size=60)


@FUZZ
@given(text_no_surrogates, text_no_surrogates, st.sampled_from([True, False, None]))
def test_any_unicode_text_round_trips(request, response, label):
    s = Sample(id="u\u00e9-\U0001f600", request=request, response=response, label=label,
               category="safety", task="qa", pair_id="p\u2028")
    path = write_samples([s], _tmpdir() / "u.jsonl")
    (back,) = load_samples(path)
    assert back == s and back.transcript_hash == s.transcript_hash


@pytest.mark.parametrize("line, field", [
    (b"\xff\xfe{}", None),                                               # not UTF-8 at all
    (json.dumps(VALID).replace('"Write f."', '"Write \\ud800"').encode(), "request"),
    (json.dumps(VALID).encode().replace(b"Write f.", b"Write \xff"), "request"),  # a bad byte
    (json.dumps({**VALID, "meta": {"k": "\ud800"}}).encode(), "meta"),
    (b"[" * 50_000 + b"]" * 50_000, None),                                # nesting bomb
    (json.dumps(VALID).replace("[[9, 22]]", "[[9, " + "9" * 5000 + "]]").encode(), None),
    (json.dumps(VALID).replace("[[9, 22]]", "[[9, 1e999]]").encode(), "gold_spans"),
    (json.dumps(VALID).replace("[[9, 22]]", "[[9, NaN]]").encode(), "gold_spans"),
    (json.dumps(VALID).replace("[[9, 22]]", "[[22, 9]]").encode(), "gold_spans"),
    (json.dumps(VALID).replace("true", "1").encode(), "label"),
    (json.dumps(VALID).replace('"code"', '"Code"').encode(), "task"),
    (b"\xef\xbb\xbf" + json.dumps(VALID).encode(), None),               # a UTF-8 BOM
    (b"NaN", None),
    (json.dumps({**VALID, "id": ""}).encode(), "id"),
])
def test_known_hostile_rows(line, field):
    path = _tmpdir() / "bad.jsonl"
    path.write_bytes(json.dumps({**VALID, "id": "first"}).encode() + b"\n" + line + b"\n")
    got = _load(path)
    assert_one_line_error(got, path)
    assert got.line == 2 and got.field == field


def test_duplicate_ids_name_both_lines_and_crlf_is_fine(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_bytes((json.dumps(VALID) + "\r\n\r\n" + json.dumps(VALID) + "\r\n").encode())
    got = _load(path)
    assert isinstance(got, InputError) and got.line == 3 and got.field == "id"
    assert "line 1" in str(got)
    path.write_bytes((json.dumps(VALID) + "\r\n").encode())
    assert load_samples(path)[0].response == VALID["response"]


@pytest.mark.parametrize("make", [lambda p: None, lambda p: p.mkdir()])
def test_missing_file_or_folder_is_one_line(tmp_path, make):
    path = tmp_path / "gone.jsonl"
    make(path)
    assert_one_line_error(_load(path), path)


# ----------------------------------------------------------------------------- YAML configs

def _valid_configs() -> dict[str, tuple[type, dict]]:
    root = configs_root()
    return {
        "model": (ModelConfig, yaml.safe_load((root / "models/smollm2-135m.yaml").read_text())),
        "prompt": (PromptTemplate, yaml.safe_load((root / "prompts/direct.yaml").read_text())),
        "policy": (Policy, yaml.safe_load((root / "policies/synthetic-demo.yaml").read_text())),
    }


CONFIGS = _valid_configs()
# Validators that read another field report that other field.
DEPENDENT = {("policy", "t_low"): {"t_high"}, ("policy", "calibration"): {"score"}}


def _load_yaml(path: Path, model: type):
    try:
        return load_policy(path) if model is Policy else load_yaml_model(path, model)
    except CalimonError as exc:
        return exc


def test_the_shipped_configs_load():
    for name, (model, doc) in CONFIGS.items():
        path = _tmpdir() / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        assert isinstance(_load_yaml(path, model), model)


@FUZZ
@given(st.sampled_from(sorted(CONFIGS)), st.binary(max_size=300))
def test_random_yaml_bytes_give_a_config_or_a_located_error(kind, data):
    model = CONFIGS[kind][0]
    path = _tmpdir() / f"{kind}.yaml"
    path.write_bytes(data)
    got = _load_yaml(path, model)
    if isinstance(got, CalimonError):
        assert isinstance(got, ConfigError)
        assert_one_line_error(got, path)
        assert got.line is None or 1 <= got.line <= data.count(b"\n") + 1


yaml_scalars = (st.none() | st.booleans() | st.integers(min_value=-10**300, max_value=10**300)
                | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(alphabet=st.characters(categories=["L", "N", "P", "Zs"]), max_size=12))
yaml_values = st.recursive(yaml_scalars, lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(st.text("abcxyz_", min_size=1, max_size=6), kids,
                                             max_size=3), max_leaves=6)


@FUZZ
@given(st.data())
def test_one_bad_config_field_is_named_with_its_line(data):
    kind = data.draw(st.sampled_from(sorted(CONFIGS)))
    model, doc = CONFIGS[kind]
    key = data.draw(st.sampled_from(sorted(doc)))
    value = data.draw(yaml_values)
    text = yaml.safe_dump({**doc, key: value}, sort_keys=False, allow_unicode=True)
    path = _tmpdir() / f"{kind}.yaml"
    path.write_text(text, encoding="utf-8")
    got = _load_yaml(path, model)
    if not isinstance(got, CalimonError):
        return
    assert isinstance(got, ConfigError)
    assert_one_line_error(got, path)
    root = (got.field or "").split(".")[0]
    assert root == key or root in DEPENDENT.get((kind, key), set()), (key, got)
    expected = text.splitlines().index(next(ln for ln in text.splitlines()
                                            if ln.startswith(f"{root}:"))) + 1
    assert got.line == expected


@FUZZ
@given(st.sampled_from(sorted(CONFIGS)), st.from_regex(r"[a-z_][a-z0-9_]{0,7}", fullmatch=True),
       yaml_values)
def test_unknown_config_keys_are_refused(kind, key, value):
    model, doc = CONFIGS[kind]
    assume(key not in doc and key not in model.model_fields)
    assume(yaml.safe_load(f"{key}: 1") == {key: 1})  # not a YAML 1.1 word such as 'yes'
    path = _tmpdir() / f"{kind}.yaml"
    path.write_text(yaml.safe_dump({**doc, key: value}, sort_keys=False))
    got = _load_yaml(path, model)
    assert isinstance(got, ConfigError) and got.field == key and got.line is not None


def _alias_bomb(levels: int) -> str:
    lines = ["bomb:", "  l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nname: *l{levels - 1}\n"


@pytest.mark.parametrize("text", [
    "version: 1\nname: \xff\n",                                     # written as latin-1 below
    "a: " + "[" * 3000 + "]" * 3000 + "\n",                          # nesting bomb
    "version: 1\nmax_input_tokens: " + "9" * 5000 + "\n",            # too many digits
    "!!python/object/apply:os.system ['echo pwned']\n",              # code execution tag
    "version: 1\n\tname: x\n",
    "- a\n- b\n",
    "",
    _alias_bomb(8),                                                  # 9**8 leaves by reference
])
def test_hostile_yaml_is_a_quick_one_line_error(text):
    import time

    path = _tmpdir() / "hostile.yaml"
    path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    start = time.process_time()  # CPU time: the machine is shared
    got = _load_yaml(path, ModelConfig)
    assert isinstance(got, ConfigError)
    assert_one_line_error(got, path)
    assert time.process_time() - start < 10


# ----------------------------------------------------------------------------- the CLI

BAD_FILES = {
    "not-json.jsonl": b'{"id": "a", oops}\n',
    "wrong-type.jsonl": json.dumps({**VALID, "label": "yes"}).encode() + b"\n",
    "bad-bytes.jsonl": b"\xff\xfe\xfd\n",
    "deep.jsonl": b"[" * 50_000 + b"]" * 50_000 + b"\n",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_cli_curve_on_a_bad_benchmark_prints_one_line_and_exits_2(tmp_path, name):
    from calimon.cli import app

    bad = tmp_path / name
    bad.write_bytes(BAD_FILES[name])
    model = tmp_path / "model"  # a local folder resolves without loading anything
    model.mkdir()
    result = CliRunner().invoke(app, ["curve", "--model", str(model), "--benchmark", str(bad),
                                      "--store", str(tmp_path / "s.sqlite"),
                                      "--out", str(tmp_path / "o"), "--quiet"])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("calimon: error: ")
    assert f"{bad}:1" in lines[0]
    assert "Traceback" not in result.output


def test_cli_missing_benchmark_file_and_bad_option_exit_2(tmp_path):
    from calimon.cli import app

    runner = CliRunner()
    missing = runner.invoke(app, ["curve", "--model", str(tmp_path), "--benchmark",
                                  str(tmp_path / "nope.jsonl"), "--quiet"])
    assert missing.exit_code == 2 and "nope.jsonl" in missing.output
    usage = runner.invoke(app, ["curve", "--n-boot", "many"])
    assert usage.exit_code == 2 and "Traceback" not in usage.output


@pytest.mark.parametrize("text", ["version: 1\nt_low: [\n", "version: 2\n", "- 1\n",
                                  "version: 1\nname: x\nscore: p_cal\ncalibration: platt\n"
                                  "readout: v\nmodel: m\nt_low: .nan\nt_high: 0.5\n"])
def test_cli_apply_policy_with_a_bad_policy_file_exits_2(tmp_path, text):
    from calimon.cli import app

    policy, scored = tmp_path / "p.yaml", tmp_path / "s.csv"
    policy.write_text(text)
    scored.write_text("id,label,p_cal\na,1,0.5\n")
    result = CliRunner().invoke(app, ["apply-policy", str(policy), str(scored),
                                      "--out", str(tmp_path / "d.csv")])
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and str(policy) in lines[0]
