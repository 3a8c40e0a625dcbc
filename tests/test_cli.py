import json

from typer.testing import CliRunner

from calimon.cli import app

runner = CliRunner()


def test_curve_with_absent_model_exits_2_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("CALIMON_MODELS_DIR", raising=False)
    result = runner.invoke(app, ["curve", "--model", "qwen3-4b", "--store",
                                 str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
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


EXPECTED_COMMANDS = {"curve", "score", "report", "robustness", "thresholds", "escalate",
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
