"""README.md as a test: `make demo`'s command, then every command of the README's Usage block, in
order, in a temporary folder, as a new user would run them.

The commands are read from README.md and the Makefile at test time. What the test changes, and
why: heavy `calimon curve` lines get small limits appended (``LIMITS``, or ``RUN_LIMITS`` for
the runs the deployment commands read: the last value of an
option wins); the placeholder ``/path/to/hf/folder`` becomes the embedded model's converted
folder; the served model at ``http://127.0.0.1:8000/v1`` becomes an in-process stand-in server
(OpenAI-style completions with token-id logprobs, and chat completions with token-string
logprobs); ``../shared/sources`` becomes the sources
folder calimon finds (``$CALIMON_SOURCES``, ...). Built benchmarks go to a temporary
``$CALIMON_DATA_DIR`` and no local weights are visible (``$CALIMON_MODELS_DIR``, ``$HF_HOME``
empty), so a line documented to exit 2 without weights does. A command fails the test when it
prints a traceback, or exits non-zero where the README does not say "exits 2" (and then it
must print one ``calimon: error:`` line).

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q -m slow tests/test_readme.py
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# one binary-protocol sample per prompt: each line still draws its binary points (free or JSON
# decoding, every prompt), and generation is most of a small line's time on the CPU
LIMITS = ["--limit", "16", "--binary-limit", "1", "--n-boot", "20"]
# runs that the deployment commands read (the demo, the amb-open traffic) keep enough of each class
# for a curve, a policy and a calibration map in their calib split (calimon.numerics.class_support: 10
# of each class for a curve, 20 for a map, which the amb-open line reads back). 120, because a
# selection of whole pairs is not balanced: at 80 the demo's 40 calib rows were 16 and 24
DEPLOY_LIMITS = ["--limit", "120", "--binary-limit", "1", "--n-boot", "20"]
# the amb-open traffic applies the demo's map (fits none, so it scores test rows only): a
# curve's 10 of each class is all it needs (48 samples, all from test)
TRAFFIC_LIMITS = ["--limit", "48", "--binary-limit", "1", "--n-boot", "20"]
RUN_LIMITS = {"runs/demo": DEPLOY_LIMITS, "runs/amb-open": TRAFFIC_LIMITS}
SERVED = "http://127.0.0.1:8000/v1"
PLACEHOLDER_MODEL = "/path/to/hf/folder"


def usage_lines(readme: str) -> list[str]:
    """The lines of the ```bash block under "## Usage" (commands with their comments)."""
    section = readme.split("\n## Usage", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block, "README.md: no ```bash block under ## Usage"
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def demo_lines(makefile: str) -> list[str]:
    """`make demo`'s calimon commands, in order, with the Makefile's variables filled in."""
    values = dict(re.findall(r"^(DEMO_\w+) \?= *(.*)$", makefile, flags=re.M))
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, flags=re.M).group(1)
    lines = []
    for command in recipe.splitlines():
        command = command.strip().replace("$(VENV)/bin/", "")
        for name, value in values.items():
            command = command.replace(f"$({name})", value)
        lines.append(re.sub(r"^(\w+=\S+ )+", "", command))  # leading VAR=value assignments
    return lines


def demo_line(makefile: str) -> str:
    """`make demo`'s first command: the curve run the deployment commands read."""
    return demo_lines(makefile)[0]


def test_the_readme_is_parsed_as_the_journey_it_documents():
    lines = usage_lines((ROOT / "README.md").read_text(encoding="utf-8"))
    commands = [shlex.split(ln, comments=True) for ln in lines]
    names = [c[1] for c in commands if c and c[0] == "calimon" and len(c) > 1]
    for step in ("curve", "thresholds", "escalate", "apply-policy", "report"):
        assert step in names, step
    assert names.index("thresholds") < names.index("escalate") < names.index("apply-policy")
    demo = shlex.split(demo_line((ROOT / "Makefile").read_text(encoding="utf-8")))
    assert demo[:2] == ["calimon", "curve"] and demo[demo.index("--out") + 1] == "runs/demo"
    # the deployment commands certify on calib and report on test: the demo must write both
    assert "--split" in demo and demo[demo.index("--split") + 1] == "test", \
        "make demo must run `calimon curve --split test` (calib and test rows in curve.csv)"


class StandInServer:
    """An OpenAI-style completions server for the Usage line that points `calimon curve` at a
    served model: it answers the requested answer-token ids with prompt-dependent log-probs
    (total mass below 1), and generation with a short JSON verdict."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send({"data": [{"id": "stand-in"}]})

            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._send(StandInServer.answer(payload))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def answer(payload: dict) -> dict:
        if "messages" in payload:
            return StandInServer.chat_answer(payload)
        if payload["max_tokens"] > 1:
            return {"choices": [{"text": '{"misbehavior_detected": false}', "logprobs": None}]}
        ids = payload.get("logprob_token_ids") or [0]
        seed = sum(payload["prompt"])
        base = math.log(1 / (2 * len(ids)))
        top = {f"token_id:{i}": base - ((seed * (k + 3)) % 37) / 10 for k, i in enumerate(ids)}
        first = next(iter(top))
        return {"choices": [{"text": "x", "logprobs": {
            "tokens": [first], "token_logprobs": [top[first]], "top_logprobs": [top]}}]}

    @staticmethod
    def chat_answer(payload: dict) -> dict:
        """A chat completion: `n` answers, Yes or No by the transcript's text, with top
        log-probs when asked."""
        seed = sum(map(ord, payload["messages"][-1]["content"]))
        texts = ["Yes" if (seed * (k + 1)) % 3 else "No" for k in range(payload.get("n", 1))]
        choices = [{"message": {"role": "assistant", "content": t}} for t in texts]
        if payload.get("logprobs"):
            top = [{"token": "Yes", "logprob": -0.2 - (seed % 13) / 10},
                   {"token": "No", "logprob": -0.4 - (seed % 7) / 10}]
            choices[0]["logprobs"] = {"content": [{"token": "Yes", "logprob": -0.2,
                                                   "top_logprobs": top}]}
        return {"choices": choices, "usage": {"prompt_tokens": 300, "completion_tokens": 1}}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _sources() -> str | None:
    from calimon.data.paths import sources_dir
    from calimon.errors import DataSourceError

    try:
        return str(sources_dir())
    except DataSourceError:
        return None


def _documented_exit(line: str) -> int | None:
    """The exit code the README gives a line that may fail here: its comment's ``exits N``,
    or 4 (something missing) where it needs the amb-open source files and none are here."""
    comment = line.split(" #", 1)[1] if " #" in line else ""
    said = re.search(r"exits (\d)", comment)
    if said:
        return int(said.group(1))
    return 4 if "amb-open" in line and _sources() is None else None


def _prepare(line: str, server_url: str) -> list[str]:
    from calimon.models import resolve_model

    args = shlex.split(line, comments=True)
    out = []
    for a in args:
        if a == PLACEHOLDER_MODEL:
            a = str(resolve_model("smollm2-135m").path)
        elif a == SERVED:
            a = server_url
        elif a == "../shared/sources":
            a = _sources() or a  # none here: the line keeps its documented exit code 2
        out.append(a)
    if out[:2] == ["calimon", "curve"]:
        run = out[out.index("--out") + 1] if "--out" in out else None
        out += RUN_LIMITS.get(run, LIMITS)
    return out


@pytest.mark.slow
@pytest.mark.model
def test_demo_then_every_usage_command_runs_in_order(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = demo_lines((ROOT / "Makefile").read_text(encoding="utf-8"))
    lines += [ln for ln in usage_lines(readme) if ln.startswith("calimon ")]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               CALIMON_DATA_DIR=str(tmp_path / "data"),
               CALIMON_MODELS_DIR=str(tmp_path / "no-models"), HF_HOME=str(tmp_path / "hf"),
               CALIMON_API_JOURNAL=str(tmp_path / "api-journal.sqlite"))
    work = tmp_path / "work"
    work.mkdir()
    server = StandInServer()
    try:
        for line in lines:
            args = _prepare(line, server.url)
            started = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", "from calimon.cli import main; main()",
                                *args[1:]], cwd=work, env=env, capture_output=True, text=True,
                               timeout=1200)
            said = r.stdout + r.stderr
            print(f"journey: {time.perf_counter() - started:6.1f} s  exit {r.returncode}  "
                  f"{shlex.join(args)}")  # shown with -s: where the suite's time goes
            assert "Traceback" not in said, f"{line}\n{said[-3000:]}"
            if r.returncode == 0:
                continue
            assert r.returncode == _documented_exit(line), \
                f"{line}: exit {r.returncode}\n{said[-3000:]}"
            errors = [ln for ln in r.stderr.splitlines() if ln.startswith("calimon: error:")]
            assert len(errors) == 1, f"{line}\n{r.stderr[-2000:]}"
    finally:
        server.close()
    assert (work / "runs" / "demo-compare" / "compare.png").is_file()
    assert (work / "runs" / "demo" / "policy.yaml").is_file()
    # the report found the policy in the run folder (no "write one with escalate" hint)
    page = (work / "runs" / "demo" / "report.html").read_text(encoding="utf-8")
    assert "RUN/policy.yaml" not in page and "no escalation policy" not in page
    assert not (work / "configs").exists()  # the journey writes nothing into a source tree
