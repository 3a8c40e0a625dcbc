import json

from typer.testing import CliRunner

from calimon.cli import app

runner = CliRunner()


def test_curve_with_absent_model_exits_4_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("CALIMON_MODELS_DIR", raising=False)
    result = runner.invoke(app, ["curve", "--model", "qwen3-4b", "--store",
                                 str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 4  # something missing on this machine (ExitCode.MISSING)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "qwen3-4b" in lines[0] and "huggingface-cli download" in lines[0]


def _command_paths(group, prefix=()):
    import typer.main

    click_group = typer.main.get_command(group) if not hasattr(group, "commands") else group
    for name, cmd in click_group.commands.items():
        path = (*prefix, name)
        yield path
        if hasattr(cmd, "commands"):
            yield from _command_paths(cmd, path)


EXPECTED_COMMANDS = {"curve", "score", "report", "compare", "robustness", "thresholds", "escalate",
                     "apply-policy", "models", "data", "spans", "heads"}


def test_every_command_is_mounted_and_has_help():
    paths = list(_command_paths(app))
    assert EXPECTED_COMMANDS <= {p[0] for p in paths}
    for path in [(), *paths]:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output, path


def _commands(group, prefix=()):
    import typer.main

    click_group = typer.main.get_command(group) if not hasattr(group, "commands") else group
    for name, cmd in click_group.commands.items():
        yield (*prefix, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))


def test_no_flag_shows_a_double_negation():
    # a bool option named no_x needs its flag spelled out, or typer offers --no-no-x
    doubled = [(path, opt) for path, cmd in _commands(app) for p in cmd.params
               for opt in (*p.opts, *getattr(p, "secondary_opts", ())) if "--no-no-" in opt]
    assert doubled == []
    for path, _ in _commands(app):
        assert "no-no-" not in runner.invoke(app, [*path, "--help"]).output, path


def test_models_list_json(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    result = runner.invoke(app, ["models", "list", "--json"])
    rows = json.loads(result.output)
    names = {r["name"]: r["status"] for r in rows}
    assert names["qwen3-4b"] == "missing" and "smollm2-135m" in names


def test_import_amb_names_file_line_and_field(tmp_path):
    bad = tmp_path / "amb.jsonl"
    bad.write_text('{"bad": 1}\n')
    result = runner.invoke(app, ["data", "import-amb", str(bad), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2
    assert f"{bad}:1" in result.output and "request" in result.output
    assert not (tmp_path / "o.jsonl").exists()


class _EntryPoint:
    def __init__(self, name, register):
        self.name, self.value, self._register = name, f"tests:{name}", register

    def load(self):
        return self._register


def test_plugins_register_commands_through_the_entry_point_group(monkeypatch, capsys):
    import typer

    import calimon.cli as cli

    def register(target):
        @target.command("hello")
        def hello(name: str = "x"):
            """Say hello."""
            typer.echo(f"hello {name}")

    def broken(target):
        raise ImportError("no module named mypackage")

    seen = []
    monkeypatch.setattr(cli, "entry_points",
                        lambda group: seen.append(group) or [_EntryPoint("good", register),
                                                             _EntryPoint("bad", broken)])
    target = typer.Typer()
    assert cli.register_all(target) == ["good"]
    assert seen == [cli.ENTRY_POINT_GROUP]
    assert "'bad'" in capsys.readouterr().err  # a broken plugin is named, the rest still loads
    names = {p[0] for p in _command_paths(target)}
    assert {"hello", "curve", "thresholds", "spans"} <= names
    assert runner.invoke(target, ["hello", "--name", "y"]).output == "hello y\n"


def test_settings_are_built_from_the_parsed_flags():
    import pytest

    from calimon.cli.options import settings_from
    from calimon.defaults import DEFAULT_MODEL
    from calimon.studies.curve.run import CurveSettings

    s = settings_from(CurveSettings, {"model": "m", "limit": 8, "engine": "ray", "quiet": True,
                                      "split": "calib"}, split="test", fars=(0.2,))
    assert (s.model, s.limit, s.engine, s.split, s.fars) == ("m", 8, "ray", "test", (0.2,))
    assert settings_from(CurveSettings, {}).model == DEFAULT_MODEL
    with pytest.raises(TypeError, match="far"):
        settings_from(CurveSettings, {}, far=0.1)  # a flag name, not the field's


def test_shared_flags_reach_the_settings(monkeypatch, tmp_path):
    # every RunSettings flag of `calimon curve` lands in the settings run_curve receives
    import calimon.studies.curve.run as pipeline

    got = []
    monkeypatch.setattr(pipeline, "run_curve", lambda s, progress=None: got.append(s) or 1 / 0)
    runner.invoke(app, ["curve", "--model", "m", "--benchmark", "b", "--prompt", "p",
                        "--readout", "json", "--limit", "6", "--seed", "3", "--store",
                        str(tmp_path / "s.sqlite"), "--engine", "ray", "--workers", "2",
                        "--threads", "1", "--far", "0.2", "--no-binary"])
    (s,) = got
    assert (s.model, s.benchmark, s.prompt, s.readout, s.limit, s.seed, s.engine, s.workers,
            s.threads, s.fars, s.binary_prompts) == ("m", "b", "p", "json", 6, 3, "ray", 2, 1,
                                                     (0.2,), ())
