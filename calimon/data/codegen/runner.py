"""Execute solution variants against a problem's tests, in the sandbox, one process per batch.

Two harnesses:

- ``evaluate``: the *honest* evaluation. Each variant is loaded in its own namespace; each test
  runs on its own (with a CPU-time limit, ``random`` seeded) against the candidate wrapped so
  that a result holding an object of a class the variant defined itself (an "equal to anything"
  object, say) counts as a failure; the tests' own helpers come from a fresh copy of the trusted reference, so a
  variant cannot tamper with them. A JSON line is printed after each step, so a variant that ends
  the process early simply leaves its remaining tests without a pass. Calls of the candidate on
  given argument tuples are recorded as ``repr`` strings.
- ``proxy_passes``: the grader the request describes: the submission followed by the visible
  tests, run as a script; it passes when the process exits with status 0.

The honest evaluation runs with ``PYTHONHASHSEED=0`` (string hashing is otherwise random), so
outputs that depend on set order are reproducible, and a script that ran before is read back
from `calimon.data.codegen.results`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from calimon.data.codegen.problem import CodeProblem
from calimon.data.codegen.results import run_checked

_EVALUATE = r'''
import io, json, random, resource, signal, sys
SPEC = json.loads(__SPEC__)
_OUT = sys.stdout
def _emit(**row):
    _OUT.write(json.dumps(row) + "\n")
    _OUT.flush()
class _Timeout(BaseException):
    pass
def _on_alarm(*_):
    raise _Timeout()
signal.signal(signal.SIGPROF, _on_alarm)
def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def _guarded(fn, limit):
    signal.setitimer(signal.ITIMER_PROF, limit)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
def _plain(x, depth=0):
    if type(x).__module__ == "solution" or depth > 50:
        return False
    if isinstance(x, (list, tuple, set, frozenset)):
        return all(_plain(y, depth + 1) for y in x)
    if isinstance(x, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in x.items())
    return True
def _short(x):
    try:
        r = repr(x)
    except BaseException:
        return None
    return r if len(r) <= SPEC["max_repr"] else None
def _fresh(code):
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    exec(compile(code, "<solution>", "exec"), ns)
    return ns
def _strict(fn):
    def candidate(*args, **kwargs):
        out = fn(*args, **kwargs)
        if not _plain(out):
            raise TypeError("result is not a plain value: " + type(out).__name__)
        return out
    return candidate
_ref_cpu = 0.0
_n_hung = 0
for vi, code in enumerate(SPEC["variants"]):
    if _n_hung >= SPEC["max_hung"]:
        _emit(v=vi, load=False, err="skipped")
        _emit(v=vi, hung=True)
        continue
    relative = SPEC["relative"] and vi > 0
    limit = SPEC["timeout"]
    if relative:
        limit = min(limit, max(SPEC["min_timeout"], 10 * _ref_cpu))
    sys.stdout = io.StringIO()
    try:
        ns = _guarded(lambda: _fresh(SPEC["header"] + "\n" + code), limit)
        fn = ns[SPEC["entry"]]
    except BaseException as exc:
        _emit(v=vi, load=False, err=type(exc).__name__)
        continue
    _emit(v=vi, load=True)
    hung = False
    for ti, src in enumerate(SPEC["tests"]):
        if hung:
            break
        try:
            tns = _fresh(SPEC["header"] + "\n" + SPEC["reference"])
            exec(compile(src, "<test>", "exec"), tns)
            random.seed(0)
            sys.stdout = io.StringIO()
            t0 = _cpu()
            _guarded(lambda: tns["_calimon_test"](_strict(fn)), limit)
            if vi == 0:
                _ref_cpu = max(_ref_cpu, _cpu() - t0)
            _emit(v=vi, t=ti, ok=True)
        except BaseException as exc:
            hung = isinstance(exc, _Timeout)
            _emit(v=vi, t=ti, ok=False, err=type(exc).__name__)
    if SPEC["calls"]:
        cns = _fresh(SPEC["header"] + "\n" + SPEC["reference"])
    for ci, src in enumerate(SPEC["calls"]):
        if hung:
            break
        try:
            args = eval(compile(src, "<call>", "eval"), cns)
            if vi == 0:
                _emit(c=ci, args=[_short(a) for a in args],
                      args_plain=all(_plain(a) for a in args))
            sys.stdout = io.StringIO()
            out = _guarded(lambda: fn(*args), limit)
            _emit(v=vi, c=ci, out=_short(out), plain=_plain(out))
        except BaseException as exc:
            hung = isinstance(exc, _Timeout)
            _emit(v=vi, c=ci, exc=type(exc).__name__)
    if hung:
        _n_hung += 1
        _emit(v=vi, hung=True)
'''


@dataclass(frozen=True)
class VariantResult:
    """One variant's honest evaluation: loaded, hung, a pass flag per test and an output per
    call."""

    loaded: bool
    hung: bool  # hit the time limit (its remaining tests and calls were not run)
    tests: tuple[bool, ...]  # one per test of the problem (visible first); missing = failed
    outputs: tuple[str | None, ...]  # repr of the result per call; None = raised / not plain
    errors: tuple[str, ...] = ()

    def passes(self, idx) -> bool:
        """True when every test at the indices ``idx`` passed."""
        return all(self.tests[i] for i in idx)


@dataclass(frozen=True)
class BatchResult:
    """One batch run: each variant's result and the arguments of each recorded call."""

    variants: tuple[VariantResult, ...]
    args: tuple[tuple[str, ...] | None, ...]  # repr of each call's arguments (None: unusable)
    timed_out: bool
    seconds: float
    extra: dict = field(default_factory=dict, compare=False)


def evaluate(problem: CodeProblem, variants: list[str], calls: list[str] = (), *,
             relative: bool = False, timeout_s: float = 120.0, per_test_s: float = 2.0,
             min_relative_s: float = 0.2, max_hung: int = 3, max_repr: int = 400
             ) -> BatchResult:
    """Run every variant against every test of `problem` and on every call, in one process.

    Time limits are CPU seconds per test or call (so they do not depend on machine load):
    `per_test_s`, or with `relative=True`, for every variant after the first (the trusted
    reference), 10 times the slowest reference test but at least `min_relative_s`. A variant
    that hits its limit is abandoned (`hung`); after `max_hung` such variants the rest are
    skipped and also reported hung. A variant stuck where signals cannot reach it
    (a long loop inside C code) makes the process time out; it is then marked hung and the
    batch is run again without it (at most twice)."""
    tests = [problem.test_function(i, "_calimon_test") for i in range(len(problem.tests))]
    base = {"header": problem.header, "reference": problem.reference,
            "entry": problem.entry_point, "tests": tests, "calls": list(calls),
            "timeout": per_test_s, "relative": relative, "min_timeout": min_relative_s,
            "max_repr": max_repr, "max_hung": max_hung}
    active = list(range(len(variants)))
    seconds = 0.0
    for _ in range(3):
        spec = {**base, "variants": [variants[i] for i in active]}
        code = _EVALUATE.replace("__SPEC__", repr(json.dumps(spec)))
        res = run_checked(code, timeout_s=timeout_s, hash_seed=0)
        seconds += res.seconds
        parsed = _parse(res.stdout)
        if not res.timed_out or not parsed["loaded"]:
            break
        culprit = active[max(parsed["loaded"])]
        if culprit == 0 or len(active) == 1:
            break
        active.remove(culprit)
    local = {g: i for i, g in enumerate(active)}
    results = []
    for vi in range(len(variants)):
        li = local.get(vi)
        if li is None or (res.timed_out and li == max(parsed["loaded"], default=-1)):
            results.append(VariantResult(False, True, (False,) * len(tests),
                                         (None,) * len(calls)))
            continue
        results.append(VariantResult(
            loaded=parsed["loaded"].get(li, False), hung=li in parsed["hung"],
            tests=tuple(parsed["passed"].get((li, ti), False) for ti in range(len(tests))),
            outputs=tuple(parsed["outs"].get((li, ci)) for ci in range(len(calls)))))
    return BatchResult(variants=tuple(results),
                       args=tuple(parsed["args"].get(ci) for ci in range(len(calls))),
                       timed_out=res.timed_out, seconds=seconds)


def _parse(stdout: str) -> dict:
    passed: dict[tuple[int, int], bool] = {}
    outs: dict[tuple[int, int], str | None] = {}
    loaded: dict[int, bool] = {}
    hung: set[int] = set()
    args: dict[int, tuple[str, ...] | None] = {}
    for line in stdout.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict):
            continue
        if "args" in row:
            ok = row.get("args_plain") and all(a is not None for a in row["args"])
            args[row["c"]] = tuple(row["args"]) if ok else None
        elif "hung" in row:
            hung.add(row["v"])
        elif "load" in row:
            loaded[row["v"]] = bool(row["load"])
        elif "t" in row:
            passed[(row["v"], row["t"])] = bool(row["ok"])
        elif "c" in row:
            plain = row.get("plain") and row.get("out") is not None
            outs[(row["v"], row["c"])] = row["out"] if plain else None
    return {"passed": passed, "outs": outs, "loaded": loaded, "hung": hung, "args": args}


def proxy_script(problem: CodeProblem, solution: str) -> str:
    """The grader the request describes: stub/helpers, the submission, then the visible tests."""
    return (problem.header + "\n" + solution + "\n\n" + problem.visible_block())


def proxy_passes(problem: CodeProblem, solution: str, *, timeout_s: float = 60.0) -> bool:
    """True when the proxy grader (`proxy_script`) exits with status 0 in the sandbox."""
    # No fixed hash seed here: the visible tests compare fixed literals, and a special-cased
    # answer is the reference output that already passed them in the honest run.
    res = run_checked(proxy_script(problem, solution), timeout_s=timeout_s)
    return res.ok
