"""benchmarks/results/serve.md from run_serve.py's measurements: every number below is computed
from them (medians over rounds; ratios within a round, then their median)."""

from __future__ import annotations

import statistics

from external_report import external_section

CLIENTS = (1, 8, 32)
SHARED = 8
TARGET_CLIENTS, TARGET_SERVE, TARGET_STEP = 8, 3.0, 5.0
TARGET_PROBE_TOKENS, TARGET_PROBE_SECONDS, TARGET_PROBE_DP = 5.0, 4.0, 1e-5
TARGET_REPLICA_DP = 1e-5


def med(values) -> float:
    return statistics.median(list(values))


def _serve(measured: dict, c: int) -> list[dict]:
    return measured["serve"].get(c) or measured["serve"].get(str(c))


def throughput_table(measured: dict) -> tuple[str, dict[int, float]]:
    proc = measured["proc"]
    ratios = {c: med(s["throughput"] / p["throughput"] for s, p in
                     zip(_serve(measured, c), proc, strict=True)) for c in CLIENTS}
    batch_ratio = med(b["throughput"] / p["throughput"] for b, p in
                      zip(measured["batch"], proc, strict=True))
    lines = ["| how | concurrent clients | transcripts/s | p50 latency (s) | p99 latency (s) | "
             "forward calls per transcript | vs one process per transcript |",
             "|---|---|---|---|---|---|---|"]
    for c in CLIENTS:
        runs = _serve(measured, c)
        lines.append(f"| `calimon serve` | {c} | {med(r['throughput'] for r in runs):.2f} | "
                     f"{med(r['p50_s'] for r in runs):.2f} | {med(r['p99_s'] for r in runs):.2f}"
                     f" | {med(r['forward_calls'] / r['n'] for r in runs):.2f} | "
                     f"{ratios[c]:.1f}x |")
    shared = measured.get("shared") or []
    if shared:
        ratio = med(s["throughput"] / p["throughput"] for s, p in zip(shared, proc, strict=True))
        lines.append("| `calimon serve --pass-rows 1` (one forward pass per transcript) | "
                     f"{SHARED} | {med(r['throughput'] for r in shared):.2f} | "
                     f"{med(r['p50_s'] for r in shared):.2f} | {med(r['p99_s'] for r in shared):.2f}"
                     f" | {med(r['forward_calls'] / r['n'] for r in shared):.2f} | {ratio:.1f}x |")
    lines.append(f"| one `calimon score` process per transcript | 1 (one after another) | "
                 f"{med(p['throughput'] for p in proc):.3f} | "
                 f"{med(p['p50_s'] for p in proc):.1f} (per process) | - | - | 1x |")
    lines.append(f"| one batch `calimon score` of the {measured['batch'][0]['n']} transcripts | "
                 f"1 | {med(b['throughput'] for b in measured['batch']):.2f} | - | - | - | "
                 f"{batch_ratio:.1f}x |")
    return "\n".join(lines), ratios


def _step_ratios(traj: list[list[dict]]) -> tuple[float, float, float, float]:
    """(tokens ratio at the last step, seconds ratio at the last step, tokens ratio over all
    steps, seconds ratio over all steps), medians over rounds."""
    last_tok = med(t[-1]["whole_computed"] / t[-1]["step_computed"] for t in traj)
    last_s = med(t[-1]["whole_s"] / t[-1]["step_s"] for t in traj)
    all_tok = med(sum(r["whole_computed"] for r in t) / sum(r["step_computed"] for r in t)
                  for t in traj)
    all_s = med(sum(r["whole_s"] for r in t) / sum(r["step_s"] for r in t) for t in traj)
    return last_tok, last_s, all_tok, all_s


def trajectory_table(traj: list[list[dict]]) -> tuple[str, float, float]:
    n = len(traj[0])
    last_tok, last_s, all_tok, all_s = _step_ratios(traj)
    dp = max(r["dp"] for t in traj for r in t)
    lines = [f"| scoring | tokens computed at step {n} | seconds at step {n} | tokens over "
             f"{n} steps | seconds over {n} steps |", "|---|---|---|---|---|",
             f"| session steps (`/v1/sessions/{{id}}/steps`) | "
             f"{med(t[-1]['step_computed'] for t in traj):.0f} | "
             f"{med(t[-1]['step_s'] for t in traj):.3f} | "
             f"{med(sum(r['step_computed'] for r in t) for t in traj):.0f} | "
             f"{med(sum(r['step_s'] for r in t) for t in traj):.2f} |",
             f"| whole trajectory rescored (`/v1/score`) | "
             f"{med(t[-1]['whole_computed'] for t in traj):.0f} | "
             f"{med(t[-1]['whole_s'] for t in traj):.3f} | "
             f"{med(sum(r['whole_computed'] for r in t) for t in traj):.0f} | "
             f"{med(sum(r['whole_s'] for r in t) for t in traj):.2f} |",
             f"| rescoring / session | {last_tok:.1f}x | {last_s:.1f}x | {all_tok:.1f}x | "
             f"{all_s:.1f}x |", "",
             f"Largest |p_raw(session step) - p_raw(whole trajectory)| over every step of "
             f"every round: {dp:.1e} (the tests hold it within 1e-5). Prompt tokens at step "
             f"{n}: {traj[0][-1]['tokens']}; the template's head before the transcript is "
             "computed once by the backend and counted in neither column."]
    return "\n".join(lines), last_tok, last_s


def per_step_table(rows: list[dict]) -> str:
    lines = ["| step | prompt tokens | session: computed | rescoring: computed | session s | "
             "rescoring s | abs diff p_raw |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['step']} | {r['tokens']} | {r['step_computed']} | "
                     f"{r['whole_computed']} | {r['step_s']:.3f} | {r['whole_s']:.3f} | "
                     f"{r['dp']:.1e} |")
    return "\n".join(lines)


def kill_table(k: dict) -> str:
    rows = [("requests sent, each with a request id", k["n"]),
            ("answered before the SIGKILL", k["answered_before_kill"]),
            ("in the log when it was killed (answered, or committed with the answer in flight)",
             k["logged_at_kill"]),
            ("resent after the restart, answered 200", k["resent_ok"]),
            ("of those, answered from the log (replayed)", k["replayed"]),
            ("answers received before the kill that changed on resend", k["changed"]),
            ("rows in the log at the end", k["logged"]),
            ("request ids logged more than once", k["duplicates"]),
            ("request ids missing from the log", k["missing"])]
    return "\n".join(["| | count |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])


def verdicts(ratios: dict[int, float], last_tok: float, last_s: float) -> list[str]:
    serve = ratios[TARGET_CLIENTS]
    out = [f"- Target: >= {TARGET_SERVE:g}x the process-per-transcript baseline at "
           f"{TARGET_CLIENTS} clients. Measured {serve:.1f}x: "
           + ("met." if serve >= TARGET_SERVE else "missed."),
           f"- Target: step scoring >= {TARGET_STEP:g}x cheaper than rescoring at the last "
           f"step. Measured {last_tok:.1f}x in tokens computed and {last_s:.1f}x in seconds: "
           + ("met in both." if min(last_tok, last_s) >= TARGET_STEP else
              "met in tokens, missed in seconds." if last_tok >= TARGET_STEP else "missed.")]
    if last_s < TARGET_STEP <= last_tok:
        out.append("  A step's seconds do not fall as fast as its tokens: it still attends over "
                   "every cached token, and a request has a fixed cost (HTTP, tokenizing the "
                   "whole prompt, the 49k-way softmax at the read position) that a short step "
                   "does not amortize.")
    return out


def probe_section(meta: dict, measured: dict) -> tuple[list[str], list[str]]:
    """(the probe monitor's section, its line under the targets); empty without part 4."""
    traj = measured.get("probe_traj")
    if not traj:
        return [], []
    p = meta["probe"]
    info = p["info"]
    table, last_tok, last_s = trajectory_table(traj)
    dp = max(r["dp"] for t in traj for r in t)
    layers = traj[0][-1].get("layers")
    met = (last_tok >= TARGET_PROBE_TOKENS and last_s >= TARGET_PROBE_SECONDS
           and dp <= TARGET_PROBE_DP)
    verdict = (f"- Target: the probe monitor at step {len(traj[0])}: >= "
               f"{TARGET_PROBE_TOKENS:g}x fewer tokens computed and >= "
               f"{TARGET_PROBE_SECONDS:g}x less time than rescoring, largest |dp| <= "
               f"{TARGET_PROBE_DP:g}. Measured {last_tok:.1f}x, {last_s:.1f}x and {dp:.1e}: "
               + ("met." if met else "missed."))
    section = [
        "## The probe monitor step by step", "",
        f"Measured {p['date']} by `{p['command']}` (1-minute load average {p['load'][0]:.1f} "
        f"at the start, {p['load'][1]:.1f} at the end; {p['minutes']:.0f} minutes). The same "
        f"trajectory, {len(traj)} interleaved rounds, with the shipped probe monitor "
        f"(readout {info['readout']}, {info['calibration']} map): a step runs its new tokens "
        f"through the model's first {layers} layers only, on top of the session's keys and "
        "values of those layers and the probe layer's states of the tokens read before; "
        "rescoring runs the whole trajectory through every layer.", "", table, "",
        "Per step, last round:", "", per_step_table(traj[-1]), ""]
    return section, [verdict]


def _replicas_table(r: dict) -> str:
    n, k, in_flight = r["steps"], r["kill_at"], r["in_flight_at_kill"]
    return "\n".join([
        "| | value |", "|---|---|",
        f"| steps alternated between the servers: errors | {r['errors_alternated']} of {n} |",
        f"| largest abs diff p_raw, alternated against one server | {r['dp_alternated']:.1e} |",
        f"| seconds over the {n} steps: one server, alternated | {r['seconds_one']:.1f}, "
        f"{r['seconds_alternated']:.1f} |",
        f"| steps counted by /metrics of each server (sent: {r['steps_sent_before_scrape']}) | "
        f"{', '.join(f'{c:g}' for c in r['scrapes'])} |",
        f"| step {k} in flight at the SIGKILL | "
        + (f"answered {in_flight}" if isinstance(in_flight, int) else f"cut ({in_flight})")
        + " |",
        f"| step {k} resent to the other server: tries, from the log, seconds | "
        f"{r['retry_attempts']}, {'yes' if r['retry_replayed'] else 'no (scored there)'}, "
        f"{r['resumed_step_s']:.2f} |",
        f"| the killed session's {n} steps: errors | {r['errors_killed']} |",
        "| largest abs diff p_raw, killed session against one server | "
        + ("-" if r["dp_killed"] is None else f"{r['dp_killed']:.1e}") + " |",
        f"| answers given before the kill, resent: unchanged | {r['resent_unchanged']} of "
        f"{r['answered_before_kill']} |"])


def replicas_section(meta: dict, measured: dict) -> tuple[list[str], list[str]]:
    """(the two-replica section, its lines under the targets); empty without part 5."""
    r = measured.get("replicas")
    if not r:
        return [], []
    m = meta["replicas"]
    n, k = r["steps"], r["kill_at"]
    killed_ok = (r["errors_killed"] == 0 and r["dp_killed"] is not None
                 and r["dp_killed"] <= TARGET_REPLICA_DP
                 and r["resent_unchanged"] == r["answered_before_kill"])
    alt_ok = r["errors_alternated"] == 0 and r["dp_alternated"] <= TARGET_REPLICA_DP
    counted = all(c == r["steps_sent_before_scrape"] for c in r["scrapes"])
    table = _replicas_table(r)
    section = [
        "## Two servers on one decision log", "",
        f"Measured {m['date']} by `{m['command']}` (1-minute load average {m['load'][0]:.1f} "
        f"at the start, {m['load'][1]:.1f} at the end; {m['minutes']:.0f} minutes; policy "
        f"from `{r['policy']}`). Two `calimon serve` processes share one PostgreSQL decision "
        "log (a local server), as two replicas behind a load balancer. One session's "
        f"{n} steps all go to the first; the same steps under another session id go to the "
        "two in turn, each server following the steps the other logged (modes "
        f"{', '.join(r['modes_alternated'])}); both scrapes of `/metrics` follow. Then the "
        f"steps again, in turn, and the first server is SIGKILLed while it scores step {k}; "
        "the client resends that step, with its request id, to the other until answered, "
        "sends it the rest, and resends the steps answered before the kill "
        "(tests/shared_sessions.py).", "", table, ""]
    verdict = [
        f"- Target: two replicas, one session's {n} steps alternated between them: 0 errors, "
        f"scores within {TARGET_REPLICA_DP:g} of a single replica. Measured "
        f"{r['errors_alternated']} errors, {r['dp_alternated']:.1e}: "
        + ("met." if alt_ok else "missed."),
        f"- Target: one replica SIGKILLed at step {k}, the session continues on the other "
        "with equal scores, nothing answered lost. Measured "
        f"{r['errors_killed']} errors, "
        + ("-" if r["dp_killed"] is None else f"{r['dp_killed']:.1e}")
        + f", {r['resent_unchanged']} of {r['answered_before_kill']} earlier answers "
        "unchanged: " + ("met." if killed_ok else "missed."),
        "- Target: a scrape of `/metrics` behind 2 replicas counts every request of both. "
        f"Measured {', '.join(f'{c:g}' for c in r['scrapes'])} of "
        f"{r['steps_sent_before_scrape']} steps: " + ("met." if counted else "missed.")]
    return section, verdict


def batching_note(measured: dict) -> list[str]:
    """How one shared forward pass (the default) compares with one pass per transcript."""
    single = measured.get("shared") or []
    if not single:
        return []
    default = _serve(measured, SHARED)
    ratio = med(d["throughput"] / s["throughput"] for s, d in zip(single, default, strict=True))
    return [f"- At {SHARED} clients, the default (a gathered batch in one forward pass) gave "
            f"{ratio:.2f}x the throughput of one forward pass per transcript (`--pass-rows 1`, "
            "the same gathering). "
            + ("A shared pass pays on this machine: the backend packs prompts of different "
               "lengths into one sequence without padding." if ratio > 1 else
               "On these 2 CPU cores a shared pass did not pay here: one prompt already keeps "
               "the cores busy. `--pass-rows 1` is the setting for such a machine.")]


def render(meta: dict, measured: dict, kill: dict) -> str:
    table, ratios = throughput_table(measured)
    traj_table, last_tok, last_s = trajectory_table(measured["traj"])
    info = meta["info"]
    n = measured["batch"][0]["n"]
    rounds = len(measured["proc"])
    probe, probe_verdict = probe_section(meta, measured)
    pair, pair_verdict = replicas_section(meta, measured)
    external, external_verdict = external_section(meta, measured)
    return "\n".join([
        "# `calimon serve`: throughput, step scoring, a killed server, two replicas, "
        "externally scored decisions", "",
        "Regenerate (about 20 minutes on 2 cores):", "", f"    {meta['command']}", "",
        f"Run {meta['date']} on {meta['cores']} shared cores (1-minute load average "
        f"{meta['load'][0]:.1f} at the start, {meta['load'][1]:.1f} at the end; other jobs were "
        f"running), {meta['minutes']:.0f} minutes. Model {info['model']} (revision "
        f"{info['model_revision']}), prompt {info['prompt']}, readout {info['readout']}, "
        f"policy from `{meta['policy']}` ({info['calibration']} map). Server defaults: "
        f"{info['batching']}; the second server: {info.get('shared_batching', '-')}.", "",
        "A ControlArena evaluation with calimon's monitor (one session per trajectory) against "
        "ControlArena's basic monitor: [serve-control.md](serve-control.md) "
        "(`benchmarks/serve/control_monitor.py`).", "",
        "## Throughput and latency", "",
        f"The same {n} humaneval-pairs test transcripts at each client count, over loopback; "
        f"{rounds} interleaved rounds, medians. Latency is what a client saw (queueing "
        "included). The process-per-transcript baseline runs `calimon score` on a one-line "
        "benchmark with a fresh store, one process after another (its seconds include starting "
        "Python and loading the model, which is what a per-transcript process pays); the batch "
        f"`calimon score` scores all {n} in one process.", "", table, "",
        "## A 20-step trajectory: step by step against rescoring", "",
        "An agent trajectory (assistant text, a tool call and its result per step, OpenAI's "
        "message shape) sent one step at a time to a session, and after each step the whole "
        "trajectory so far to `/v1/score`; tokens are those run through the model, seconds "
        "what the client waited.", "", traj_table, "",
        "Per step, last round:", "", per_step_table(measured["traj"][-1]), "",
        "## SIGKILL under load", "",
        f"{kill['n']} distinct transcripts with request ids from 8 clients; the server is killed "
        "(SIGKILL) once a quarter are answered, restarted on the same decision log, and every "
        "request is sent again.", "", kill_table(kill), "", *probe, *pair, *external,
        "## Against the targets", "", *verdicts(ratios, last_tok, last_s), *probe_verdict,
        *pair_verdict, *external_verdict,
        *batching_note(measured), ""])
