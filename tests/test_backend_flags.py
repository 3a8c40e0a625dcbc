"""One declaration per backend flag: `BackendSettings`' fields generate every scoring command's
flags (`calimon.cli.options.backend_flags`), and `backend_options` only picks and checks."""

from __future__ import annotations

from dataclasses import fields

import pytest
import typer
from typer.main import get_command

from calimon.cli import app
from calimon.cli.options import backend_flags
from calimon.errors import InputError
from calimon.scoring.backends.options import backend_options
from calimon.scoring.engines import BackendSettings

SCORING = (("curve",), ("score",), ("robustness",), ("spans",), ("heads", "train"), ("serve",))


def _options(path: tuple[str, ...]) -> set[str]:
    cmd = get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {o for p in cmd.params for o in p.opts if o.startswith("--")}


def test_every_scoring_command_takes_the_same_backend_flags():
    from calimon.cli.serve import SERVE_EXCLUDES

    want = {"--" + f.name.replace("_", "-") for f in fields(BackendSettings)}
    for path in SCORING:
        expected = want - ({"--" + n for n in SERVE_EXCLUDES} if path == ("serve",) else set())
        assert expected <= _options(path), (path, sorted(expected - _options(path)))


def test_serve_offers_no_flag_that_means_nothing_to_a_server():
    serve = _options(("serve",))
    assert not {"--offline", "--engine", "--workers"} & serve
    assert {"--ray-address", "--base-url", "--max-input-tokens"} <= serve
    cmd = get_command(app).commands["serve"]
    (tokens,) = [p for p in cmd.params if p.name == "max_input_tokens"]
    assert "curve.json" not in tokens.help and "design run" in tokens.help
    with pytest.raises(TypeError, match="no backend flag"):
        backend_flags(exclude=("nope",))(lambda: None)


def test_a_flag_takes_its_default_and_help_from_the_settings_field():
    cmd = get_command(app).commands["score"]
    by_name = {p.name: p for p in cmd.params}
    for f in fields(BackendSettings):
        assert by_name[f.name].default == f.default
        assert by_name[f.name].help == f.metadata["help"]


def test_a_command_declaring_a_backend_flag_itself_is_refused():
    def cmd(device: str = "cpu") -> None:
        pass

    with pytest.raises(TypeError, match="declares backend flags itself"):
        backend_flags(cmd)


def test_the_generated_flags_reach_the_command_through_ctx_params():
    seen = {}

    @backend_flags
    def cmd(ctx: typer.Context, name: str = "x") -> None:
        seen.update(ctx.params)

    one = typer.Typer()
    one.command()(cmd)
    from typer.testing import CliRunner

    r = CliRunner().invoke(one, ["--threads", "3", "--offline", "--name", "y"])
    assert r.exit_code == 0, r.output
    assert seen["threads"] == 3 and seen["offline"] is True and seen["name"] == "y"
    assert seen["backend"] == "transformers"


def test_backend_options_pick_the_backends_own_fields_and_check_them():
    s = {f.name: getattr(BackendSettings(), f.name) for f in fields(BackendSettings)}
    assert backend_options("transformers", s) == {"device": "auto"}  # batch_tokens: by device
    assert backend_options("transformers", {**s, "threads": 2})["threads"] == 2
    assert backend_options("chat", s) == {"concurrency": 8}
    assert backend_options("vllm", {**s, "kv_cache_gib": 1}) == {"kv_cache_gib": 1}
    assert backend_options("my-plugin", s) == {}
    with pytest.raises(InputError, match="needs --base-url"):
        backend_options("http", s)
    with pytest.raises(InputError) as err:
        backend_options("transformers", {**s, "batch_tokens": 0})
    assert err.value.field == "batch_tokens"
