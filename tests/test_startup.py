"""Start-up: the command line imports no heavy package until a command needs it, and `calimon
curve` reaches its first forward pass without the plotting and learning packages
(benchmarks/perf/startup.py measures how long that takes; perf-startup.md), and the backend
imports only the model class its folder names."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ["torch", "transformers", "sklearn", "matplotlib", "scipy"]


def test_importing_the_cli_and_its_commands_imports_no_heavy_package():
    code = ("import json, sys, calimon.cli, calimon.cli.curve, calimon.cli.score; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


@pytest.mark.model
def test_curve_reaches_its_first_forward_pass_without_sklearn_or_matplotlib():
    sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
    import startup

    rec = startup.one_run()
    assert rec["wall"] > 0 and rec["cpu"] > 0
    assert {"torch", "transformers"} <= set(rec["loaded"])  # the forward pass needs them
    assert not {"sklearn", "matplotlib"} & set(rec["loaded"])


def _ref(folder: Path):
    from calimon.models import ModelConfig, ModelSource, ResolvedModel

    cfg = ModelConfig(version=1, name="m", source=ModelSource(kind="local"), path=str(folder))
    return ResolvedModel("m", folder, "r", cfg)


def test_the_backend_takes_the_model_class_its_config_names(tmp_path):
    import transformers

    from calimon.scoring.backends.loading import causal_lm_class

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    assert causal_lm_class(_ref(tmp_path)) is transformers.Qwen3ForCausalLM
    for arch in (["NoSuchForCausalLM"], ["Qwen3Model"], [], None):
        (tmp_path / "config.json").write_text(json.dumps({"architectures": arch}))
        assert causal_lm_class(_ref(tmp_path)) is transformers.AutoModelForCausalLM
    (tmp_path / "config.json").unlink()
    assert causal_lm_class(_ref(tmp_path)) is transformers.AutoModelForCausalLM


def test_python_dash_m_calimon_runs_the_cli_and_its_help_imports_no_heavy_package():
    code = ("import json, runpy, sys\n"
            "sys.argv = ['calimon', 'curve', '--help']\n"
            "try:\n    runpy.run_module('calimon', run_name='__main__')\n"
            "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=True).stdout
    assert "Usage: calimon curve" in out
    assert json.loads(out.strip().splitlines()[-1]) == []
    done = subprocess.run([sys.executable, "-m", "calimon", "--version"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("calimon ")


def test_what_inspect_loads_at_start_imports_no_model_or_statistics_package():
    """Inspect imports calimon's entry point (the integrations' monitors, policy files and their
    guarantees) at the start of every evaluation where calimon is installed: it must not pull
    torch, transformers or scipy.stats (1.3 s) in before a monitor is used."""
    code = ("import json, sys, calimon.integrations.local, calimon.deploy.policy_file; "
            "print(json.dumps([m for m in ['torch', 'transformers', 'scipy.stats', 'sklearn'] "
            "if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
