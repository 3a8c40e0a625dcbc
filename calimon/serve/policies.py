"""The policies of one server (`Policies`): the live one, which decides every answer; a
candidate run in shadow beside it (``calimon serve --shadow``: scored and logged on every
request the live one answers, never answered); and the policies a rollback returns to.

`Policies.promote` makes the candidate live and `Policies.rollback` the one live before it;
each change is logged first (`calimon.serve.policy_log`), and only a logged change is made. What
may be promoted is the review loop's to decide (`calimon.review.promotion`); this module only
moves the policies. A request takes the live policy and its monitor when it starts, so one
answer never mixes two policies. `start_policy` reads the log when a server starts: it serves the
policy the log says is live, or refuses, naming the file, when that file is gone or changed.

A candidate that pins the live policy's monitor shares its reading (one forward pass decides
both); one with another monitor reads each request on its own queue. Beside an externally
scored policy the candidate must be one too, reading the same score from each request through
its own readout (`calimon.serve.external`). The shadow's decision is logged in the transaction
of the live one's (`calimon.serve.decision_log.LoggedDecision.shadow_row`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calimon.errors import InputError
from calimon.samples import Sample
from calimon.serve.batcher import Batcher
from calimon.serve.errors import ApiError
from calimon.serve.external import check_pair
from calimon.serve.loading import ServedMonitor
from calimon.serve.metrics import Counter
from calimon.serve.policy_log import PolicyChange, Served, history
from calimon.verdict import Verdict


@dataclass
class Slot:
    """A policy the server holds: its loaded monitor (None until needed, for a policy a
    rollback may return to after a restart), the queue that reads for it, its file."""

    served: ServedMonitor | None
    batcher: Batcher | None
    path: str
    sha256: str
    name: str
    checks: tuple | None = None  # the review loop's last checks of it, with what they read

    def named(self) -> dict[str, str]:
        """Its name, sha256 and file."""
        return {"policy": self.name, "policy_hash": self.sha256, "path": self.path}


class Policies:
    """The live, shadow and previous policies of ``service`` (module docstring); ``path``: the
    live policy's file. ``loader(path, reuse)``: loads a policy file (sharing ``reuse``'s
    monitor when it pins the same one), for a rollback past a restart. ``listeners``: called
    after each change (the review loop follows the live policy)."""

    def __init__(self, service, path: str):
        self.service, self.live_path = service, path
        self.shadow: Slot | None = None
        self.previous: list[Slot] = []
        self.loader: Callable[[str, ServedMonitor], ServedMonitor] | None = None
        self.listeners: list[Callable[[], None]] = []
        self.started_by: PolicyChange | None = None  # the logged change that made it live
        self.note: str | None = None
        self._batchers: list[Batcher] = []
        self._lock = asyncio.Lock()
        m = service.metrics
        self.shadow_decisions = Counter("calimon_shadow_decisions_total", "Decisions of the "
                                        "policy run in shadow (logged, never answered), by "
                                        "kind.", ("decision",))
        self.changes = Counter("calimon_policy_changes_total", "Changes of the live policy "
                               "(promote, rollback) and refused promotions, by kind.",
                               ("kind",))
        m.extra += [PolicyInfo(self), self.shadow_decisions, self.changes]

    # -- the slots ---------------------------------------------------------------------------
    def live(self) -> Slot:
        """The live policy."""
        s = self.service
        return Slot(s.served, s.batcher, self.live_path, s.served.policy_hash,
                    s.served.policy.name)

    def set_shadow(self, served: ServedMonitor, path: str) -> None:
        """Run ``served`` (the policy at ``path``) in shadow; its own queue unless it shares
        the live policy's monitor. A candidate that could not read the live policy's requests
        is refused (`calimon.serve.external.check_pair`)."""
        if served.policy_hash == self.service.served.policy_hash:
            raise InputError("the shadow policy is the live policy (same sha256)", path=path,
                             field="shadow")
        check_pair(self.service.served, served, path)
        self.shadow = Slot(served, self._queue_for(served), path, served.policy_hash,
                           served.policy.name)

    def _queue_for(self, served: ServedMonitor) -> Batcher | None:
        s = self.service
        if served.monitor is s.served.monitor or served.external:
            return None
        batcher = Batcher(served.score, s.settings.batching, s.metrics, gather=served.gathers)
        self._batchers.append(batcher)
        return batcher

    async def start(self) -> None:
        """Start the queues of the policies that read on their own."""
        for b in self._batchers:
            await b.start()

    async def stop(self) -> None:
        """Stop those queues."""
        for b in self._batchers:
            await b.stop()

    # -- shadow ------------------------------------------------------------------------------
    async def shadow_answer(self, sample: Sample, verdict: Verdict, audit_id: str,
                            score: float | None = None) -> dict[str, Any] | None:
        """The shadow policy's decision on a request the live one read as ``verdict`` (an
        external shadow reads the request's ``score`` through its own readout); None without
        a shadow, or when its monitor failed: counted, and the live answer goes on."""
        slot = self.shadow
        if slot is None:
            return None
        live = self.service.served
        try:
            if slot.served.external:
                verdict = slot.served.monitor.reading(score, sample.transcript_hash)
            elif slot.batcher is not None:
                verdict = await slot.batcher.score(sample)
                if verdict.status == "error":
                    raise RuntimeError("the shadow monitor failed on this transcript")
            key = slot.served.monitor.key
            return {"shadow": True, "status": verdict.status,
                    **slot.served.decide(verdict, audit_id), "policy": slot.name,
                    "policy_hash": slot.sha256, "live_policy_hash": live.policy_hash,
                    "model": key.model, "model_revision": key.model_revision}
        except Exception:  # noqa: BLE001 - the shadow never fails a live answer
            self.service.metrics.errors.inc("shadow")
            return None

    # -- changes -----------------------------------------------------------------------------
    async def record(self, kind: str, slot: Slot, by: str, detail: dict[str, Any]
                     ) -> PolicyChange:
        """Log a change (or a refused promotion) of ``slot``; returns it as logged."""
        change = PolicyChange(kind, slot.name, slot.sha256, slot.path,
                              previous_hash=self.service.served.policy_hash, by_whom=by,
                              detail=detail)
        try:
            logged = await asyncio.to_thread(self.service.log.record_change, change)
        except Exception as exc:  # noqa: BLE001 - a change not logged is not made
            self.service.metrics.errors.inc("log")
            raise ApiError(503, "log_unavailable", f"the decision log could not be written "
                           f"({type(exc).__name__}); nothing changed; retry",
                           headers={"Retry-After": "1"}) from None
        self.changes.inc(kind)
        return logged

    async def promote(self, by: str, detail: dict[str, Any]) -> PolicyChange:
        """Make the shadow policy live (logged first); the live one is kept for a rollback."""
        async with self._lock:
            slot = self.shadow
            if slot is None:
                raise ApiError(409, "no_candidate", "no policy runs in shadow: start the "
                               "server with --shadow CANDIDATE", "candidate")
            logged = await self.record("promote", slot, by, detail)
            self.previous.append(self.live())
            self.shadow = None
            self._make_live(slot)
            return logged

    async def rollback(self, by: str) -> PolicyChange:
        """Make the policy live before the last promotion live again (logged first)."""
        async with self._lock:
            if not self.previous:
                raise ApiError(409, "nothing_to_roll_back", "no promotion to roll back: the "
                               "live policy is the one this log started with", "policy")
            back = self.previous[-1]
            if back.served is None:
                back = await asyncio.to_thread(self._load, back)
                back.batcher = self._queue_for(back.served) or self.service.batcher
                await back.batcher.start()
            logged = await self.record("rollback", back, by, {})
            self.previous.pop()
            self._make_live(back)
            return logged

    def _load(self, slot: Slot) -> Slot:
        if self.loader is None:
            raise ApiError(409, "not_loadable", f"policy {slot.name!r} is not loaded and this "
                           "server cannot load policies", "policy")
        try:
            check_file(Served(slot.path, slot.sha256, slot.name), "the policy to roll back to")
            served = self.loader(slot.path, self.service.served)
            check_pair(self.service.served, served, slot.path)
        except InputError as exc:
            raise ApiError(409, "not_loadable", str(exc), "policy") from None
        return Slot(served, None, slot.path, slot.sha256, slot.name)

    def _make_live(self, slot: Slot) -> None:
        s = self.service
        other = slot.served.monitor is not s.served.monitor
        s.served = slot.served
        if slot.batcher is not None and slot.batcher is not s.batcher:
            if s.batcher not in self._batchers:
                # held and stopped with the others: a request that took it still runs on it,
                # and asyncio holds its consumer task only weakly
                self._batchers.append(s.batcher)
            s.batcher = slot.batcher
        if other:  # the sessions' caches were read by another monitor
            from calimon.serve.kv import HeadCache, supports_kv

            s.heads = HeadCache()
            for session in list(s.sessions._sessions.values()):
                session.kv = None
            new = slot.served
            s.kv = new.kv_capable and supports_kv(new.backend.model)
            s.probe_kv = new.probe_capable and supports_kv(new.backend.model)
        self.live_path = slot.path
        for listener in self.listeners:
            listener()

    def state(self) -> dict[str, Any]:
        """The live, shadow and previous policies (JSON-ready)."""
        return {"live": self.live().named(),
                "shadow": self.shadow.named() if self.shadow else None,
                "previous": [p.named() for p in self.previous]}


class PolicyInfo:
    """``calimon_policy_info{role,policy,sha256} 1`` for the live, shadow and previous
    policies (a `calimon.serve.metrics.Metrics` extra)."""

    def __init__(self, policies: Policies):
        self.policies = policies

    def header(self) -> list[str]:
        """The metric's HELP and TYPE."""
        return ["# HELP calimon_policy_info The policies this server holds, by role: live "
                "(decides), shadow (scored and logged, never answered), previous (what a "
                "rollback returns to).", "# TYPE calimon_policy_info gauge"]

    def lines(self) -> list[str]:
        """One line per policy held."""
        st = self.policies.state()
        held = [("live", st["live"])] + ([("shadow", st["shadow"])] if st["shadow"] else [])
        held += [("previous", p) for p in st["previous"]]
        return [f'calimon_policy_info{{role="{role}",policy="{_esc(p["policy"])}",'
                f'sha256="{p["policy_hash"]}"}} 1' for role, p in held]


def _esc(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def sha256_of(path: str | Path) -> str | None:
    """The sha256 of a file's bytes; None when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def check_file(served: Served, what: str) -> None:
    """Refuse (naming the file) a policy file that is gone or is not the one logged."""
    found = sha256_of(served.path)
    if found != served.sha256:
        why = "is gone" if found is None else f"has changed (sha256 {found[:12]})"
        raise InputError(f"{what}, policy {served.name!r} (sha256 {served.sha256[:12]}), "
                         f"{why}: restore that file, or start the server on another policy "
                         "(it is logged as a new deploy)", path=served.path, field="policy")


def start_policy(log, path: str | Path, name: str
                 ) -> tuple[str, list[Served], PolicyChange]:
    """What a server starting on the policy at ``path`` (named ``name``) serves, from the
    decision log's changes: ``(path to serve, the policies a rollback returns to, the change
    that makes it live)``. A policy the log has not served starts a new history: the change is
    a ``deploy`` not logged yet (``seq`` 0: the caller logs it once the policy loads). One in
    the history means the log's live policy, whose file must be the one logged (else
    `InputError`, naming it)."""
    sha = sha256_of(path)
    changes = log.changes()
    stack = history(changes)
    if not any(s.sha256 == sha for s in stack):
        return str(path), [], PolicyChange("deploy", name, sha or "", str(path))
    live = stack[-1]
    made = next(c for c in reversed(changes) if c.policy_hash == live.sha256
                and c.kind != "refused")
    if live.sha256 == sha:
        return str(path), stack[:-1], made
    check_file(live, f"the decision log's live policy ({made.kind} {made.seq})")
    return live.path, stack[:-1], made
