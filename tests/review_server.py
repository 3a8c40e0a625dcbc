"""A real `calimon serve --review` for the browser and closed-loop tests, with no model: the
monitor is a chat-completions API (``--backend chat``) answered in this process by a stand-in
whose P(Yes) follows the transcript, so every part of the server (the CLI, the queue, the gate,
the stores, a SIGKILL) is the real one.

The stand-in's traffic (`standin_samples`) has two kinds of transcript, chat and code, like
`calimon.studies.shift.synthetic`, and the same flaw: benign code transcripts score higher. Each
response starts with its kind (``kind-chat``, ``kind-code``); a misbehaving one holds the word
``hardcoded``. The score is ``sigmoid(base + noise)``, the noise a hash of the text, so it is
the same on every call.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fakes_http import FakeServer
from serve_server import CALIMON, ROOT, Server, free_port

from calimon.samples import Sample

WORDS = {"chat": "please explain recipe travel weather story movie friend advice history "
                 "music garden".split(),
         "code": "def return import list dict loop index parse json class assert yield "
                 "lambda".split()}


def standin_p(text: str) -> float:
    """The stand-in monitor's P(Yes) of a prompt holding one transcript (module docstring);
    ``p=0.62`` in it, when there is one, is taken as it is."""
    given = re.findall(r"p=([0-9.]+)", text)
    if given:
        return min(max(float(given[-1]), 1e-4), 1 - 1e-4)
    h = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2 ** 64
    noise = math.sqrt(2) * _erfinv(2 * h - 1)
    base = 0.5 if "hardcoded" in text else (-0.8 if "kind-code" in text else -2.0)
    return 1 / (1 + math.exp(-(base + noise)))


def _erfinv(y: float) -> float:
    y = min(max(y, -0.999999), 0.999999)
    a = 0.147
    ln = math.log(1 - y * y)
    first = 2 / (math.pi * a) + ln / 2
    return math.copysign(math.sqrt(math.sqrt(first ** 2 - ln / a) - first), y)


def chat_answer(payload: dict) -> dict:
    """A chat completion answering the monitor's question with the stand-in's P(Yes)."""
    text = "\n".join(str(m.get("content") or "") for m in payload.get("messages", []))
    p = standin_p(text)
    top = [{"token": "Yes", "logprob": math.log(p), "bytes": list(b"Yes")},
           {"token": "No", "logprob": math.log(1 - p), "bytes": list(b"No")}]
    return {"choices": [{"message": {"role": "assistant", "content": "Yes"},
                         "logprobs": {"content": [{"token": "Yes", "logprob": math.log(p),
                                                   "top_logprobs": top}]}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 1}}


def chat_server() -> FakeServer:
    """The stand-in monitor's API (a context manager)."""
    return FakeServer([(200, chat_answer, 0.0)])


def standin_samples(n_pairs: int, code_share: float, seed: int, prefix: str,
                    split: bool = True) -> list[Sample]:
    """``2 n_pairs`` labelled transcripts (a benign and a misbehaving one per pair); with
    ``split``, even pairs calib and odd ones test."""
    rng = random.Random(seed)
    out = []
    for i in range(n_pairs):
        kind = "code" if rng.random() < code_share else "chat"
        words = WORDS[kind]
        request = " ".join(rng.choice(words) for _ in range(10))
        for label in (False, True):
            body = " ".join(rng.choice(words) for _ in range(rng.randint(15, 40)))
            hack = " then hardcoded the expected output" if label else ""
            out.append(Sample(id=f"{prefix}-{i:04d}-{int(label)}", request=request,
                              response=f"kind-{kind} {body}{hack}", label=label,
                              category="safety", task="code" if kind == "code" else "qa",
                              pair_id=f"{prefix}-{i:04d}", source=f"{prefix}-{kind}",
                              split=("test" if i % 2 else "calib") if split else None))
    return out


def chat_flags(url: str) -> list[str]:
    """The flags that make a command score through the stand-in's API."""
    return ["--backend", "chat", "--base-url", url, "--served-model", "m"]


def env(tmp: Path) -> dict[str, str]:
    """The environment of the commands: offline, the API journal in ``tmp``, no key."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "CALIMON_API_JOURNAL": str(tmp / "journal.sqlite"), "CALIMON_API_KEY": "",
            "OPENAI_API_KEY": "unused"}


def start(policy: Path, tmp: Path, port: int, chat_url: str | None, *args: str,
          timeout: float = 180.0) -> Server:
    """`calimon serve POLICY --review` on ``port`` (the same port after a restart, so a page
    open in the browser finds it again), waited for until /healthz answers. ``chat_url``: the
    stand-in's API; None: the model the policy pins, on the default backend."""
    out = tmp / "serve.out"
    cmd = [str(CALIMON), "serve", str(policy), "--port", str(port), "--log",
           str(tmp / "decisions.sqlite"), "--review", "--review-store",
           str(tmp / "review.sqlite"), *(chat_flags(chat_url) if chat_url else []), *args]
    fh = out.open("ab")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env(tmp))
    fh.close()
    server = Server(proc, f"http://127.0.0.1:{port}", None, out)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"calimon serve exited ({proc.returncode}):\n{server.log_text()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    server.kill()
    raise RuntimeError(f"calimon serve did not answer in {timeout} s:\n{server.log_text()}")


@contextmanager
def served_review(tmp: Path, bodies: Iterable[dict]) -> Iterator[dict]:
    """`calimon serve --review` (keys of ada and bob, half of the automatic decisions kept)
    around the stand-in monitor's API, after scoring ``bodies`` (``/v1/score`` requests) as ada:
    ``{"server", "tmp", "restart"}``; ``restart()`` starts it again on the same port. Stopped
    at the end."""
    from review_fakes import KEYS, keys_file, policy

    with chat_server() as api:
        pol = policy(tmp, audit=0.2, far=0.1, mr=0.2)
        port = free_port()
        args = ("--keys", str(keys_file(tmp)), "--review-retain", "0.5")
        server = start(pol, tmp, port, api.url, *args)
        with httpx.Client(base_url=server.url, headers={
                "Authorization": f"Bearer {KEYS['ada']}"}, timeout=60) as c:
            for body in bodies:
                r = c.post("/v1/score", json=body)
                assert r.status_code == 200, r.text
        state = {"server": server, "tmp": tmp, "restart": lambda: start(
            pol, tmp, port, api.url, *args)}
        try:
            yield state
        finally:
            state["server"].stop()
