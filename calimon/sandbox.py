"""Run untrusted Python snippets (benchmark code checks) in a constrained subprocess.

Limits: wall-clock timeout (the whole process group is killed), CPU seconds, address space,
file size, number of processes; a fresh temporary working directory that is deleted afterwards;
an isolated interpreter (`-I`: no user site, no PYTHON* variables, no cwd on sys.path); an
empty environment; no network (a new network namespace when the OS allows it, and in every case
socket creation is disabled before the snippet runs).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from calimon.errors import SandboxError

_PRELUDE = """\
import socket as _s
def _no_network(*a, **k):
    raise OSError("network access is disabled in the calimon sandbox")
_s.socket = _no_network
_s.create_connection = _no_network
_s.getaddrinfo = _no_network
del _s, _no_network
"""


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def _limits(cpu_s: int, memory_mb: int, fsize_mb: int, nproc: int):
    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        fs = fsize_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fs, fs))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        except (ValueError, OSError):
            pass

    return apply


_UNSHARE: list[str] | None = None


def _net_isolation_prefix() -> list[str]:
    """`unshare -rn` when this OS lets us create a network namespace, else nothing."""
    global _UNSHARE
    if _UNSHARE is None:
        exe = shutil.which("unshare")
        _UNSHARE = []
        if exe:
            for flags in (["-n"], ["-rn"]):
                try:
                    probe = subprocess.run([exe, *flags, "true"], capture_output=True, timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                if probe.returncode == 0:
                    _UNSHARE = [exe, *flags]
                    break
    return _UNSHARE


def run_python(code: str, *, timeout_s: float = 10.0, memory_mb: int = 1024,
               fsize_mb: int = 16, nproc: int = 64, stdin: str = "") -> SandboxResult:
    """Execute `code` as a script in the sandbox and return what happened.

    The snippet never runs in the caller's process or directory. A result with
    `timed_out=True` had its process group killed.
    """
    workdir = tempfile.mkdtemp(prefix="calimon-sandbox-")
    try:
        script = os.path.join(workdir, "snippet.py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(_PRELUDE + code)
        cmd = [*_net_isolation_prefix(), sys.executable, "-I", "-B", script]
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        cpu = max(1, int(timeout_s) + 1)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    preexec_fn=_limits(cpu, memory_mb, fsize_mb, nproc))
        except OSError as exc:
            raise SandboxError(f"could not start the sandboxed interpreter: {exc}") from exc
        try:
            out, err = proc.communicate(stdin.encode(), timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            timed_out = True
        return SandboxResult(returncode=None if timed_out else proc.returncode,
                             stdout=out.decode("utf-8", "replace")[:100_000],
                             stderr=err.decode("utf-8", "replace")[:100_000],
                             timed_out=timed_out, seconds=time.monotonic() - start)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
