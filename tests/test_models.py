import pytest

from calimon.config import load_yaml_model
from calimon.errors import ConfigError, ModelNotAvailableError
from calimon.models import ModelConfig, load_model_config, resolve_model


@pytest.fixture
def no_hf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("CALIMON_MODELS_DIR", raising=False)


def test_all_shipped_model_configs_validate():
    for name in ("smollm2-135m", "qwen3-4b", "qwen3-4b-instruct-2507", "qwen3-0.6b", "qwen3-8b",
                 "llama-3.1-8b-instruct"):
        assert load_model_config(name).name == name


def test_missing_weights_say_what_to_do(no_hf_cache):
    with pytest.raises(ModelNotAvailableError) as err:
        resolve_model("qwen3-4b")
    msg = str(err.value)
    assert "download Qwen/Qwen3-4B`" in msg and "--model" in msg and "\n" not in msg
    assert err.value.exit_code == 4


def test_models_dir_env_is_used(tmp_path, monkeypatch, no_hf_cache):
    folder = tmp_path / "models" / "qwen3-0.6b"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"max_position_embeddings": 40960}')
    monkeypatch.setenv("CALIMON_MODELS_DIR", str(tmp_path / "models"))
    r = resolve_model("qwen3-0.6b")
    assert r.path == folder.resolve() and r.revision.startswith("files-")


def test_local_folder_and_unknown_name(tmp_path):
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    r = resolve_model(str(tmp_path))
    assert r.config.max_input_tokens == 2048
    with pytest.raises(ConfigError, match="unknown model "):
        resolve_model("no-such-model")
    with pytest.raises(ModelNotAvailableError, match="no such folder"):
        resolve_model("/no/such/folder")


def test_bad_config_names_file_line_and_field(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("version: 1\nname: x\nsource:\n  kind: huggingface\ndtype: float8\n")
    with pytest.raises(ConfigError) as err:
        load_yaml_model(bad, ModelConfig)
    assert str(bad) in str(err.value) and ":5" in str(err.value) and "dtype" in str(err.value)
    bad.write_text("version: 1\nname: x\nsource: {kind: huggingface}\nextra_key: 1\n")
    with pytest.raises(ConfigError, match="extra_key"):
        load_yaml_model(bad, ModelConfig)


def test_an_api_model_has_no_weights_and_is_described_for_the_chat_backend(tmp_path):
    from calimon.models import describe_api_model

    with pytest.raises(ModelNotAvailableError, match="served behind an API.*--backend chat"):
        resolve_model("gpt-4o-mini")
    ref = describe_api_model("gpt-4o-mini")
    assert ref.revision == "gpt-4o-mini-2024-07-18" and ref.config.api.prefill == "none"
    assert describe_api_model("smollm2-135m", "served-name").revision == "api:served-name"
    assert describe_api_model("not-configured").revision == "api:not-configured"
    bad = tmp_path / "m.yaml"
    bad.write_text("version: 1\nname: m\nsource:\n  kind: api\napi:\n  prefill: sometimes\n")
    with pytest.raises(ConfigError, match=r"m.yaml:5: field 'api.prefill'"):
        load_yaml_model(bad, ModelConfig)


def test_models_list_shows_api_models_as_such():
    from calimon.model_listing import list_models

    row = next(r for r in list_models() if r["name"] == "gpt-4o-mini")
    assert row["status"] == "api" and "--backend chat" in row["detail"]
