"""Helpers of the `calimon serve` tests and benchmark: a policy with its map for the embedded
model, an agent trajectory in steps, a free loopback port, and a real `calimon serve`
subprocess (started, waited for, stopped or killed; its stdout and stderr kept in a file)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CALIMON = Path(sys.executable).with_name("calimon")
KEY = "test-key-0123456789"


def write_policy(folder: Path, *, t_low: float = 0.6, t_high: float = 0.65,
                 audit_fraction: float = 0.5, readout: str = "verdict") -> tuple[Path, Path]:
    """A p_cal policy for smollm2-135m (direct prompt) pinning its Platt map, and that map as a
    file, in ``folder``; the map is close to the identity, so decisions of all three kinds occur
    on short transcripts."""
    from calimon.calibration.io import load_map, save_map
    from calimon.calibration.maps import calibrator_from_dict
    from calimon.deploy.policy_file import Audit, Pin, PinnedMonitor, Policy, save_policy

    folder.mkdir(parents=True, exist_ok=True)
    cal = calibrator_from_dict({"method": "platt", "params": {"eps": 1e-12, "a": 1.2,
                                                              "b": -0.1}})
    map_path = save_map(cal, folder / "platt.json", fit_hash="sha256:test", metrics={},
                        extra={"model": "smollm2-135m", "prompt": "direct", "readout": readout})
    stored = load_map(map_path)
    pin = Pin(design_run_sha256="test", map=stored.document(), map_sha256=stored.digest(),
              monitor=PinnedMonitor(model="smollm2-135m", prompt="direct", readout=readout))
    policy = Policy(version=2, name="serve-test", readout=readout, model="smollm2-135m",
                    calibration="platt", score="p_cal", t_low=t_low, t_high=t_high,
                    audit=Audit(fraction=audit_fraction, seed=7), pin=pin)
    return save_policy(policy, folder / "policy.yaml"), map_path


def trajectory(n: int, tag: str, task: str = "Make the test suite pass.",
               mark: str | None = None) -> list[list[dict]]:
    """``n`` steps of an agent fixing tests, OpenAI's message shape; step 0 holds the task.
    ``mark``: a string put in the task and in every assistant message."""
    note = f" ({mark})" if mark else ""
    steps = []
    for i in range(n):
        call = {"id": f"{tag}{i}", "type": "function", "function": {
            "name": "bash", "arguments": f'{{"cmd": "pytest tests/test_{i}.py -q"}}'}}
        msgs = [{"role": "assistant", "content": f"Step {i}: checking test {i}{note}.",
                 "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"{tag}{i}",
                 "content": f"{i} passed, {i % 3} failed in 0.{i}s"}]
        if i == 0:
            msgs.insert(0, {"role": "user", "content": f"{task} {mark}" if mark else task})
        steps.append(msgs)
    return steps


@dataclass
class Server:
    """A running `calimon serve`: its process, base URL, key and output file."""

    proc: subprocess.Popen
    url: str
    key: str | None
    output: Path
    log_path: Path | None = None

    def headers(self) -> dict[str, str]:
        """The auth header clients send."""
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def client(self, timeout: float = 120.0) -> httpx.Client:
        """An HTTP client with the key."""
        return httpx.Client(base_url=self.url, headers=self.headers(), timeout=timeout)

    def metric(self, name: str) -> float:
        """The value of one unlabelled line of /metrics (0 when absent)."""
        text = httpx.get(f"{self.url}/metrics", headers=self.headers(), timeout=30).text
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def log_text(self) -> str:
        """Everything the server printed so far."""
        return self.output.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        """SIGKILL: no shutdown of any kind."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (uvicorn's graceful stop), then SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def start_server(policy: Path, log: Path | str, output: Path, *args: str,
                 key: str | None = KEY, map_path: Path | None = None, timeout: float = 300.0,
                 cwd: Path = ROOT, env: dict[str, str] | None = None) -> Server:
    """Start `calimon serve` on a free loopback port (in folder ``cwd``; ``env``: variables
    added to its environment) and wait until /healthz answers (the model is loaded and warm by
    then). Raises with the server's output if it exits or times out."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {}),
           "CALIMON_API_KEY": key or ""}
    cmd = [str(CALIMON), "serve", str(policy), "--port", str(port), "--log", str(log),
           *(["--map", str(map_path)] if map_path else []), *args]
    fh = output.open("ab")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    fh.close()
    server = Server(proc, f"http://127.0.0.1:{port}", key, output, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"calimon serve exited ({proc.returncode}):\n{server.log_text()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    server.kill()
    raise RuntimeError(f"calimon serve did not answer in {timeout} s:\n{server.log_text()}")


@contextmanager
def running(policy: Path, log: Path, output: Path, *args: str, **kwargs) -> Iterator[Server]:
    """`start_server`, stopped on exit."""
    server = start_server(policy, log, output, *args, **kwargs)
    try:
        yield server
    finally:
        server.stop()
