"""Run untrusted Python snippets (benchmark code checks) in a constrained subprocess.

Layers, each used where this OS allows it (`sandbox_layers()` says which are active):
- limits: wall-clock timeout, CPU seconds, address space, file size, process count;
- a fresh temporary working directory (deleted afterwards), an environment of calimon's own
  making (PATH, HOME, TMPDIR, LANG and, where asked, PYTHONHASHSEED) and an interpreter that
  imports no `site` (`PYTHON_FLAGS`: the standard library only, so a check does not depend on
  what is installed beside calimon, and starts in a third of the time), with no cwd on sys.path;
- namespaces: no network (new network namespace) and a new PID namespace whose every process is
  killed when the snippet ends, so nothing it started outlives the call;
- an unprivileged user (uid/gid 65534) when the caller is root, so the process limit binds and
  root-owned files cannot be changed;
- Landlock: writes, deletions and file creation are allowed only beneath the temporary directory;
- in every case, an audit hook installed before the snippet runs refuses sockets and writes
  outside the temporary directory (the fallback where Landlock is missing).
"""

from __future__ import annotations

import ctypes
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

NOBODY = 65534
# -S: no `site` (no site-packages, no .pth hooks such as an editable install's finder, which
# cost 40 ms of a 60 ms start); -P: no script folder on sys.path; -B: no .pyc written. Not -E or
# -I: the environment is built here, and PYTHONHASHSEED must reach the interpreter.
PYTHON_FLAGS = ("-S", "-P", "-B")

_PRELUDE = """\
def _calimon_guard():
    import os, sys
    root = os.path.realpath(os.getcwd())
    def inside(path):
        try:
            p = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return p == root or p.startswith(root + os.sep)
    writes = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
              "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree"}
    def hook(event, args):
        if event.startswith("socket."):
            raise OSError("network access is disabled in the calimon sandbox")
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            mode, flags = (args[1] or ""), (args[2] or 0)
            if (any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT
                                                           | os.O_TRUNC)) and not inside(args[0]):
                raise PermissionError(f"writing outside the sandbox is refused: {args[0]}")
        elif event in writes and args and isinstance(args[0], (str, bytes, os.PathLike)):
            if not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
                raise PermissionError(f"{event} outside the sandbox is refused")
    sys.addaudithook(hook)
_calimon_guard()
del _calimon_guard
"""


@dataclass(frozen=True)
class SandboxResult:
    """One sandboxed process: exit status (None when it timed out), output, whether it hit the
    time limit, and its wall time."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        """True when the process exited with status 0 within the time limit."""
        return self.returncode == 0 and not self.timed_out


# -- Landlock (Linux >= 5.13), through raw syscalls; x86-64 and arm64 share the numbers ----------
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_PR_SET_NO_NEW_PRIVS = 38


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _landlock_abi() -> int:
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return max(0, int(_libc().syscall(_SYS_CREATE, None, ctypes.c_size_t(0),
                                          ctypes.c_uint32(1))))
    except (OSError, AttributeError):
        return 0


def _write_rights(abi: int) -> int:
    rights = (1 << 1) | sum(1 << b for b in range(4, 13))  # write file, remove, make *
    if abi >= 2:
        rights |= 1 << 13  # refer (rename/link across directories)
    if abi >= 3:
        rights |= 1 << 14  # truncate
    return rights


def _apply_landlock(workdir: str, abi: int) -> None:
    libc = _libc()
    rights = _write_rights(abi)
    attr = _RulesetAttr(rights)
    fd = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                      ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    dfd = os.open(workdir, os.O_PATH | os.O_CLOEXEC)
    rule = _PathBeneath(rights, dfd)
    if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(rule),
                    ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_add_rule failed")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS) failed")
    if libc.syscall(_SYS_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(dfd)
    os.close(fd)


def _preexec(workdir: str, cpu_s: int, memory_mb: int, fsize_mb: int, nproc: int, abi: int):
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
        if abi:
            _apply_landlock(workdir, abi)

    return apply


# -- which layers this machine supports (probed once) ------------------------------------------
_LAYERS: dict | None = None


def _probe(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def sandbox_layers() -> dict:
    """The isolation layers available here: {"namespaces": [...], "drop_user": bool,
    "landlock_abi": int}."""
    global _LAYERS
    if _LAYERS is None:
        unshare = shutil.which("unshare")
        ns: list[str] = []
        if unshare:
            for flags in (["-n", "-p", "-f", "--kill-child"],
                          ["-r", "-n", "-p", "-f", "--kill-child"], ["-n"], ["-rn"]):
                if _probe([unshare, *flags, "true"]):
                    ns = [unshare, *flags]
                    break
        drop: list[str] = []
        setpriv = shutil.which("setpriv")
        if os.geteuid() == 0 and setpriv:
            cand = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
            if _probe([*cand, sys.executable, "-I", "-c", "pass"]):
                drop = cand
        _LAYERS = {"namespaces": ns, "drop_user": drop, "landlock_abi": _landlock_abi()}
    return _LAYERS


def run_python(code: str, *, timeout_s: float = 10.0, memory_mb: int = 1024,
               fsize_mb: int = 16, nproc: int = 64, stdin: str = "",
               hash_seed: int | None = None) -> SandboxResult:
    """Execute `code` as a script in the sandbox and return what happened.

    The snippet never runs in the caller's process or directory. A result with
    `timed_out=True` had its processes killed. `hash_seed` fixes the interpreter's string
    hashing (PYTHONHASHSEED), so output that depends on set order is reproducible; by default
    it is random, as for any Python process.
    """
    layers = sandbox_layers()
    workdir = tempfile.mkdtemp(prefix="calimon-sandbox-")
    try:
        script = os.path.join(workdir, "snippet.py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(_PRELUDE + code)
        if layers["drop_user"]:
            os.chown(workdir, NOBODY, NOBODY)
            os.chown(script, NOBODY, NOBODY)
        cmd = [*layers["namespaces"], *layers["drop_user"], sys.executable, *PYTHON_FLAGS, script]
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        if hash_seed is not None:
            env["PYTHONHASHSEED"] = str(hash_seed)
        cpu = max(1, int(timeout_s) + 1)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    preexec_fn=_preexec(workdir, cpu, memory_mb, fsize_mb, nproc,
                                                        layers["landlock_abi"]))
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"could not start the sandboxed interpreter: {exc}") from exc
        try:
            out, err = proc.communicate(stdin.encode(), timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            timed_out = True
        _kill_group(proc)  # whatever the snippet left behind in its group goes too
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
        pass
