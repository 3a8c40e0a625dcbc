"""Untrusted artifacts: calibration maps load only from checked JSON, config names cannot leave
their folder, and benchmark code runs in the sandbox (no network, bounded time and memory)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calimon.calibration.io import load_map, save_map
from calimon.calibration.maps import CALIBRATORS, make_calibrator
from calimon.config import named_config_path
from calimon.errors import CalimonError, ConfigError, InputError
from calimon.sandbox import run_python

REPO = Path(__file__).resolve().parents[1]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fitted_docs() -> dict[str, dict]:
    rng = np.random.default_rng(0)
    p = rng.uniform(size=300)
    y = rng.uniform(size=300) < p
    folder = Path(tempfile.mkdtemp(prefix="calimon-maps-"))
    docs = {}
    for method in sorted(CALIBRATORS):
        path = save_map(make_calibrator(method).fit(p, y), folder / f"{method}.json",
                        fit_hash="sha256:test", metrics={"ece": 0.1, "auroc": float("nan")})
        docs[method] = json.loads(path.read_text())
    return docs


DOCS = _fitted_docs()
GRID = np.linspace(0.0, 1.0, 101)


def _write(doc_or_text, name: str = "map.json") -> Path:
    path = Path(tempfile.mkdtemp(prefix="calimon-map-")) / name
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
    path.write_text(text, encoding="utf-8")
    return path


def _load(path: Path):
    try:
        return load_map(path)
    except CalimonError as exc:
        return exc


def _assert_named(err, path: Path, field: str | None = None) -> None:
    assert isinstance(err, InputError), f"{type(err).__name__}: {err}"
    assert str(path) in str(err) and "\n" not in str(err)
    if field is not None:
        assert err.field == field, err


def test_saved_maps_load_and_predict_probabilities():
    for method, doc in DOCS.items():
        got = _load(_write(doc))
        assert got.method == method
        out = got.predict(GRID)
        assert np.isfinite(out).all() and (out >= 0).all() and (out <= 1).all()


json_scalars = (st.none() | st.booleans() | st.integers(-10**300, 10**300)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6))
json_values = st.recursive(json_scalars, lambda k: st.lists(k, max_size=4)
                           | st.dictionaries(st.text(max_size=5), k, max_size=3), max_leaves=8)


@FUZZ
@given(st.data())
def test_a_tampered_map_loads_sanely_or_names_the_field(data):
    method = data.draw(st.sampled_from(sorted(DOCS)))
    doc = json.loads(json.dumps(DOCS[method]))
    where = data.draw(st.sampled_from(["top", "params"]))
    target = doc if where == "top" else doc["params"]
    key = data.draw(st.sampled_from(sorted(target)) | st.text(min_size=1, max_size=5))
    target[key] = data.draw(json_values)
    path = _write(doc)
    got = _load(path)
    if isinstance(got, CalimonError):
        _assert_named(got, path)
        assert got.field is not None
        # the field is the tampered key itself (which may contain dots) or starts with it
        assert got.field == key or got.field.split(".")[0] in (key, "params", "method",
                                                                 "calibration map")
    else:  # whatever got through still maps probabilities to probabilities
        out = got.predict(GRID)
        assert np.isfinite(out).all() and (out >= 0).all() and (out <= 1).all()


@pytest.mark.parametrize("key", [".", "x.y"])
def test_an_unexpected_key_with_dots_is_named_whole(key):
    doc = json.loads(json.dumps(DOCS["beta"]))
    doc[key] = None
    path = _write(doc)
    _assert_named(_load(path), path, key)


@pytest.mark.parametrize("method, key, value, field", [
    ("platt", "a", float("nan"), "params.a"),
    ("platt", "b", float("inf"), "params.b"),
    ("platt", "a", "1.0", "params.a"),
    ("platt", "a", True, "params.a"),
    ("platt", "a", None, "params.a"),
    ("platt", "a", [1.0], "params.a"),
    ("temperature", "temperature", -1.0, "params.temperature"),
    ("isotonic", "x_thresholds", [0.1, float("nan"), 0.3], "params.x_thresholds"),
    ("isotonic", "x_thresholds", DOCS["isotonic"]["params"]["x_thresholds"][::-1],
     "params.x_thresholds"),
    ("isotonic", "y_thresholds", [0.0, 2.0], "params.y_thresholds"),
    ("isotonic", "x_thresholds", [], "params.x_thresholds"),
    ("isotonic", "x_thresholds", {"0": 1}, "params.x_thresholds"),
    ("histogram", "n_bins", 10**12, "params.edges"),
    ("histogram", "n_bins", -3, "params.n_bins"),
    ("histogram", "values", [0.5] * 3, "params.values"),
    ("histogram", "strategy", "os.system", "params.strategy"),
    ("beta", "c", "__import__('os')", "params.c"),
    ("platt", "extra", 1, "params"),
])
def test_malicious_params_are_refused_by_field(method, key, value, field):
    doc = json.loads(json.dumps(DOCS[method]))
    doc["params"][key] = value
    path = _write(json.dumps(doc))  # NaN / Infinity are written as the bare JSON extensions
    _assert_named(_load(path), path, field)


@pytest.mark.parametrize("change, field", [
    ({"surprise": 1}, "surprise"),
    ({"format": "pickle"}, "format"),
    ({"version": True}, "version"),
    ({"version": 2}, "version"),
    ({"method": "eval"}, "method"),
    ({"metrics": {"ece": "low"}}, "metrics.ece"),
    ({"metrics": {"ece": float("inf")}}, "metrics.ece"),
    ({"extra": []}, "extra"),
    ({"fit_set_hash": ""}, "fit_set_hash"),
    ({"params": None}, "params"),
])
def test_malicious_top_level_fields_are_refused(change, field):
    path = _write(json.dumps({**DOCS["platt"], **change}))
    _assert_named(_load(path), path, field)


def test_huge_arrays_load_in_bounded_time_or_are_refused():
    n = 200_000
    x = np.linspace(0, 1, n).tolist()
    doc = {**DOCS["isotonic"], "params": {"x_thresholds": x, "y_thresholds": x}}
    start = time.process_time()
    got = _load(_write(doc))
    assert time.process_time() - start < 10
    assert not isinstance(got, CalimonError) and got.predict([0.25])[0] == pytest.approx(0.25)
    doc["params"]["y_thresholds"] = x[:-1]
    path = _write(doc)
    _assert_named(_load(path), path, "params.y_thresholds")


@pytest.mark.parametrize("text", ["", "[]", "null", "NaN", '"map"', "{", "\x00"])
def test_not_a_map_object(text):
    path = _write(text)
    _assert_named(_load(path), path)


def test_a_pickle_is_never_unpickled(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "map.json"
    path.write_bytes(pickle.dumps(Payload()))
    _assert_named(_load(path), path)
    assert not marker.exists()


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"format": ' + "9" * 5000 + "}"])
def test_json_bombs_are_input_errors(text):
    path = _write(text)
    _assert_named(_load(path), path)


def test_integers_beyond_float_range_are_input_errors():
    doc = json.loads(json.dumps(DOCS["platt"]))
    doc["params"]["a"] = 10**400
    path = _write(doc)
    _assert_named(_load(path), path, "params.a")


# ----------------------------------------------------------------------------- config paths

@pytest.fixture
def configs(tmp_path, monkeypatch):
    root = tmp_path / "configs"
    (root / "models").mkdir(parents=True)
    (root / "models" / "ok.yaml").write_text("version: 1\n")
    (tmp_path / "outside.yaml").write_text("version: 1\n")
    monkeypatch.setenv("CALIMON_CONFIGS", str(root))
    return root


@pytest.mark.parametrize("name", ["../outside", "..", "../../etc/passwd", "/etc/passwd",
                                  str(Path(tempfile.gettempdir()) / "x"), "a/b", "a\\b",
                                  ".hidden", "", "ok\x00", "ok.yaml/..", "./ok"])
def test_config_names_cannot_leave_their_folder(configs, name):
    with pytest.raises(ConfigError) as info:
        named_config_path("models", name)
    assert info.value.field == "model" and "\n" not in str(info.value)


def test_a_symlink_that_leaves_the_folder_is_refused(configs):
    (configs / "models" / "evil.yaml").symlink_to(configs.parent / "outside.yaml")
    (configs / "models" / "alias.yaml").symlink_to(configs / "models" / "ok.yaml")
    with pytest.raises(ConfigError, match="leaves"):
        named_config_path("models", "evil")
    assert named_config_path("models", "alias").name == "alias.yaml"
    assert named_config_path("models", "ok") == configs / "models" / "ok.yaml"


def test_prompt_and_model_loaders_use_the_checked_names(configs):
    from calimon.models import load_model_config
    from calimon.prompts import load_prompt

    for call, name in ((load_prompt, "../models/ok"), (load_model_config, "../outside")):
        with pytest.raises(ConfigError):
            call(name)


# ----------------------------------------------------------------------------- the sandbox

def test_sandbox_blocks_the_network_even_through_the_raw_socket_module():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    code = f"""
import _socket, socket
for make in (lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2),
             lambda: _socket.socket().connect(("127.0.0.1", {port}))):
    try:
        make()
        print("CONNECTED")
    except OSError as exc:
        print("blocked", exc)
"""
    try:
        result = run_python(code, timeout_s=10)
        with pytest.raises(OSError):  # nothing reached the listener
            server.accept()
    finally:
        server.close()
    assert result.stdout.count("blocked") == 2 and "CONNECTED" not in result.stdout


def test_sandbox_stops_a_snippet_that_runs_forever():
    result = run_python("while True:\n    pass\n", timeout_s=1.5)
    assert result.timed_out and not result.ok and result.seconds < 15


def test_sandbox_caps_memory():
    result = run_python("x = bytearray(3 * 1024 ** 3)\nprint('allocated')\n", memory_mb=256)
    assert not result.ok and "allocated" not in result.stdout and "MemoryError" in result.stderr


def test_sandbox_runs_in_a_fresh_temp_dir_with_an_empty_environment(monkeypatch):
    monkeypatch.setenv("CALIMON_FAKE_SECRET", "s3cret")
    result = run_python("import os, json\nprint(json.dumps([os.getcwd(), dict(os.environ)]))")
    cwd, env = json.loads(result.stdout)
    assert "s3cret" not in result.stdout and set(env) <= {"PATH", "HOME", "TMPDIR", "LANG",
                                                          "LC_CTYPE"}
    assert Path(cwd).name.startswith("calimon-sandbox-") and not Path(cwd).exists()
    assert not Path(cwd).resolve().is_relative_to(REPO)


def test_sandbox_limits_the_number_of_processes():
    code = """
import os, time
made = 0
try:
    for _ in range(40):
        if os.fork() == 0:
            time.sleep(1)
            os._exit(0)
        made += 1
except OSError:
    pass
for _ in range(made):
    os.wait()
print(made)
"""
    result = run_python(code, nproc=8, timeout_s=20)
    assert int(result.stdout.strip() or 0) < 40


def _ours(pid: int) -> bool:
    try:
        return b"snippet.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_sandbox_leaves_no_process_behind():
    code = """
import os, time
pid = os.fork()
if pid == 0:  # a daemon-style child: lets go of the pipes, stays in the process group
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(30)
    os._exit(0)
print(pid)
"""
    result = run_python(code, timeout_s=10)
    assert not result.timed_out
    pid = int(result.stdout.strip())
    try:
        time.sleep(0.2)
        assert not _ours(pid)
    finally:
        if _ours(pid):
            os.kill(pid, signal.SIGKILL)


def test_sandbox_cannot_write_outside_its_temp_dir(tmp_path):
    token = f"calimon-sandbox-probe-{uuid.uuid4().hex}"
    targets = [tmp_path / token, REPO / token, REPO / "calimon" / token]
    code = "import sys\nfor p in sys.argv[1:] or %r:\n    try:\n        open(p, 'w').write('x')\n" \
           "    except OSError as exc:\n        print('blocked', exc)\n" % [str(t) for t in targets]
    try:
        run_python(code, timeout_s=10)
        assert not any(t.exists() for t in targets)
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- probe head cards

def _head_fixture(root: Path):
    """A small valid logistic head saved under root/m/; returns (card path, model ref)."""
    from types import SimpleNamespace

    from calimon.scoring.probes.artifacts import (
        BaseModelRef,
        HeadCard,
        PromptRef,
        TrainingRef,
        save_head,
    )
    from calimon.scoring.probes.head import ProbeHead

    d = 8
    head = ProbeHead("sequence", "logistic", 3, {"mean": np.zeros(d), "scale": np.ones(d),
                                                  "coef": np.linspace(-1, 1, d),
                                                  "intercept": np.array([0.1])}, pooling="mean")
    card = HeadCard(version=1, name="h", kind="sequence", estimator="logistic", layer=3,
                    pooling="mean", base_model=BaseModelRef(name="m", revision="r",
                                                            hidden_size=d, num_layers=4),
                    prompt=PromptRef(name="direct", template_hash="abc", max_input_tokens=2048),
                    training=TrainingRef(benchmark="b", dataset_hash="x", split="train",
                                         n_samples=10, n_positive=5, categories=["safety"],
                                         seed=0), weights_file="", weights_sha256="",
                    calimon_version="0", created="now")
    return save_head(head, card, root), SimpleNamespace(name="m", revision="r")


def _load_head(path, ref):
    from calimon.scoring.probes.artifacts import load_head

    try:
        return load_head(path, model_ref=ref, hidden_size=8)
    except CalimonError as exc:
        return exc


def _save_weights(path: Path, params: dict) -> str:
    """Write params as safetensors; returns the hash a card must carry for them."""
    from safetensors.numpy import save_file

    from calimon.scoring.probes.head import params_hash

    save_file(params, str(path))
    return params_hash(params)


def test_a_saved_head_loads_and_checks_its_hash(tmp_path):
    card, ref = _head_fixture(tmp_path)
    head, meta = _load_head(card, ref)
    assert meta.name == "h" and head.hidden_size == 8
    weights = card.parent / meta.weights_file
    blob = bytearray(weights.read_bytes())
    blob[-1] ^= 1  # flip one bit of one weight
    weights.write_bytes(bytes(blob))
    assert "sha256" in str(_load_head(card, ref))


@pytest.mark.parametrize("name", ["../m/h", "/etc/passwd", ".h", "h/../../x", ""])
def test_head_names_cannot_leave_the_heads_folder(tmp_path, name):
    _, ref = _head_fixture(tmp_path)
    from calimon.scoring.probes.artifacts import load_head

    with pytest.raises(CalimonError):
        load_head(name, model_ref=ref, root=tmp_path)


card_values = st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30)
                           | st.floats() | st.text(max_size=8),
                           lambda k: st.lists(k, max_size=3)
                           | st.dictionaries(st.text("abc", min_size=1, max_size=3), k,
                                             max_size=2), max_leaves=5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_tampered_head_card_loads_or_names_its_field(data):
    import yaml

    root = Path(tempfile.mkdtemp(prefix="calimon-head-"))
    card, ref = _head_fixture(root)
    doc = yaml.safe_load(card.read_text())
    key = data.draw(st.sampled_from(sorted(doc)))
    doc[key] = data.draw(card_values)
    card.write_text(yaml.safe_dump(doc, sort_keys=False))
    got = _load_head(card, ref)
    if isinstance(got, CalimonError):
        assert str(card) in str(got) and "\n" not in str(got), got


@pytest.mark.parametrize("blob", [b"", b"\x00" * 64, b"\xff" * 8 + b"{}",
                                  pickle.dumps({"mean": [0.0]}),
                                  (10**12).to_bytes(8, "little") + b"{"])
def test_a_garbage_weights_file_is_a_calimon_error(tmp_path, blob):
    card, ref = _head_fixture(tmp_path)
    (card.parent / "h.safetensors").write_bytes(blob)
    got = _load_head(card, ref)
    assert isinstance(got, CalimonError), f"{type(got).__name__}: {got}"


def test_a_card_cannot_point_its_weights_outside_its_folder(tmp_path):
    import yaml

    card, ref = _head_fixture(tmp_path / "heads")
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes((card.parent / "h.safetensors").read_bytes())
    doc = yaml.safe_load(card.read_text())
    doc["weights_file"] = "../../elsewhere.safetensors"
    card.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert isinstance(_load_head(card, ref), CalimonError)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused_even_with_a_matching_hash(tmp_path, bad):
    import yaml

    card, ref = _head_fixture(tmp_path)
    params = {"mean": np.zeros(8), "scale": np.ones(8), "coef": np.full(8, bad),
              "intercept": np.array([0.0])}
    digest = _save_weights(card.parent / "h.safetensors", params)
    doc = yaml.safe_load(card.read_text())
    doc["weights_sha256"] = digest
    card.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert isinstance(_load_head(card, ref), CalimonError)


def test_a_tampered_weights_file_with_a_tampered_card_still_checks_shapes(tmp_path):
    import yaml

    card, ref = _head_fixture(tmp_path)
    params = {"mean": np.zeros(4), "scale": np.ones(4), "coef": np.ones(4),
              "intercept": np.array([0.0])}
    digest = _save_weights(card.parent / "h.safetensors", params)
    doc = yaml.safe_load(card.read_text())
    doc["weights_sha256"] = digest
    card.write_text(yaml.safe_dump(doc, sort_keys=False))
    got = _load_head(card, ref)
    assert isinstance(got, CalimonError) and "hidden size" in str(got)


def test_a_key_with_a_newline_is_named_on_one_line():
    doc = json.loads(json.dumps(DOCS["beta"]))
    doc["\n"] = None
    path = _write(doc)
    err = _load(path)
    _assert_named(err, path, "\n")
    assert "field '\\n'" in str(err)
