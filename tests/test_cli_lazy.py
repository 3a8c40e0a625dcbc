"""The command line loads lazily: ``calimon --help`` lists every command from a static table
(`calimon.cli.lazy.COMMANDS`, checked here against the real commands) without importing a
command module, a command's module loads only when it runs or shows its help, no command
module imports numpy and the like at import time, and plugins of the ``calimon.commands``
entry point group (a real installed distribution here) still mount, list and run.
benchmarks/perf/startup.py measures how long a help or a usage error takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from calimon.cli.lazy import BUILTIN, COMMANDS, module_commands

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ["numpy", "pydantic", "yaml", "sqlite3", "torch", "transformers", "calimon.models",
         "calimon.samples", "calimon.scoring.backends"]


def _first_paragraph(cmd) -> str:
    return (cmd.short_help or cmd.help or "").split("\n\n")[0].strip()


def test_the_table_lists_every_real_command_with_its_module_and_one_line_help():
    registering = {p.stem for p in (ROOT / "calimon" / "cli").glob("*.py")
                   if "\ndef register(" in p.read_text(encoding="utf-8")}
    assert registering == set(BUILTIN)  # a command module missing from the table mounts nothing
    seen = {}
    for module in BUILTIN:
        for name, cmd in module_commands(module).items():
            assert name not in seen, (name, module, seen.get(name))
            seen[name] = (module, _first_paragraph(cmd))
    assert set(seen) == set(COMMANDS)
    for name, (module, text) in seen.items():
        assert (COMMANDS[name].module, COMMANDS[name].help) == (module, text), name


def _run(code: str, env: dict | None = None) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


SHOW = ("import json, sys\nfrom calimon.cli import app\nsys.argv = ['calimon', {args}]\n"
        "try:\n    app(prog_name='calimon')\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('calimon.cli.'))))")


def test_the_main_help_lists_every_command_and_imports_no_command_module():
    out = subprocess.run([sys.executable, "-c", SHOW.format(args="'--help'")],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "COLUMNS": "200"})
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(loaded) <= {"calimon.cli.lazy", "calimon.cli.conventions"}, loaded
    for name, entry in COMMANDS.items():
        assert f"│ {name} " in out.stdout and entry.help[:40] in out.stdout, name


def test_a_command_loads_its_own_module_only():
    loaded = _run(SHOW.format(args="'thresholds', '--help'"))
    assert "calimon.cli.deploy" in loaded
    assert not {f"calimon.cli.{m}" for m in BUILTIN} - {"calimon.cli.deploy"} & set(loaded)
    loaded = _run(SHOW.format(args="'curve', '--no-such-flag'"))
    assert "calimon.cli.curve" in loaded and "calimon.cli.deploy" not in loaded


def test_no_command_module_imports_a_heavy_package():
    code = ("import importlib, json, sys\nfrom calimon.cli.lazy import BUILTIN\n"
            "for m in BUILTIN:\n    importlib.import_module('calimon.cli.' + m)\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert _run(code) == []


def test_a_usage_error_names_the_flag_and_exits_2():
    from calimon.cli import app

    r = CliRunner().invoke(app, ["curve", "--no-such-flag"])
    assert r.exit_code == 2 and "--no-such-flag" in r.output


PLUGIN = '''
import typer

def register(app):
    @app.command("hello")
    def hello(name: str = typer.Option("world", help="Whom to greet.")):
        """Say hello from a plugin."""
        typer.echo(f"hello {name}")
'''


def _install_plugin(root: Path) -> dict:
    """A real distribution on PYTHONPATH whose entry point (group calimon.commands) names a
    register function, as `pip install` of a plugin package leaves it."""
    (root / "calimon_hello.py").write_text(PLUGIN)
    info = root / "calimon_hello-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: calimon-hello\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[calimon.commands]\nhello = calimon_hello:register\n")
    return {"PYTHONPATH": os.pathsep.join([str(root), str(ROOT)]), "COLUMNS": "200"}


def test_an_installed_plugin_is_listed_and_runs_and_a_builtin_command_does_not_load_it(
        tmp_path):
    env = {**os.environ, **_install_plugin(tmp_path)}

    def calimon(*args):
        return subprocess.run([sys.executable, "-m", "calimon", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=300)

    listed = calimon("--help")
    assert listed.returncode == 0 and "│ hello " in listed.stdout
    assert "Say hello from a plugin." in listed.stdout and "│ curve " in listed.stdout
    ran = calimon("hello", "--name", "ada")
    assert (ran.returncode, ran.stdout) == (0, "hello ada\n"), ran.stderr
    helped = calimon("hello", "--help")
    assert "Whom to greet." in helped.stdout and "[OPTIONS]" in helped.stdout
    loaded = _run(SHOW.replace("calimon.cli.'", "calimon_hello'").format(
        args="'thresholds', '--help'"), env=env)
    assert loaded == []  # a built-in command does not import the plugin


def test_a_broken_plugin_is_named_and_the_rest_still_runs(monkeypatch):
    import calimon.cli as cli

    class EP:
        name, value = "bad", "tests:bad"

        def load(self):
            raise ImportError("no module named mypackage")

    monkeypatch.setattr(cli, "entry_points", lambda group: [EP()])
    r = CliRunner().invoke(cli.app, ["--help"])
    assert r.exit_code == 0 and "│ curve " in r.output
    assert "command plugin 'bad'" in r.stderr
    r = CliRunner().invoke(cli.app, ["nope"])
    assert r.exit_code == 2 and "No such command 'nope'" in r.output


def test_a_help_or_usage_error_imports_no_heavy_package():
    """typer would build a pydantic coercion even for an option left out; calimon's
    conventions build one only for a value given (`calimon.cli.conventions`)."""
    for args in ("'--help'", "'curve', '--help'", "'curve', '--no-such-flag'",
                 "'thresholds'", "'nope'"):
        code = SHOW.replace("m.startswith('calimon.cli.')", f"m in {HEAVY!r}").format(args=args)
        assert _run(code) == [], args


def test_a_value_given_is_still_coerced_and_checked(tmp_path):
    from calimon.cli import app

    r = CliRunner().invoke(app, ["curve", "--n-boot", "many"])
    assert r.exit_code == 2 and "'--n-boot'" in r.output
    r = CliRunner().invoke(app, ["thresholds", str(tmp_path / "nowhere"), "--delta", "x"])
    assert r.exit_code == 2 and "'--delta'" in r.output
