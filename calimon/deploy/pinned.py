"""What a policy decides with, read from the policy file alone: one resolver for `calimon serve`
and every in-process integration, the same from any folder.

A version-2 policy (`calimon escalate`, or `calimon pin-policy` for a version-1 file) pins what
its decisions depend on besides the thresholds (`calimon.deploy.policy_file.Pin`): the monitor
its design run scored with (model, revision, prompt, template hash, readout, defenses, input
limit), its calibration map, whole, and the sha256 of the scored CSV the thresholds were chosen
on. `resolve_policy` reads them from the file: nothing is looked up relative to the working
folder, and no other map is ever put in the pinned one's place. A piece that does not match is
refused with one line naming it: a map given beside the policy that is not the pinned one, a
pinned map whose digest, method or provenance disagrees with the policy, a prompt other than
the pinned one, and, once the monitor is built (`ResolvedPolicy.meet`), a monitor of another
model, revision, template, readout or defenses. ``force`` lets a mismatch through, and what it
let through is kept (``forced``). A version-1 policy, which named its design run by a path, is
refused with the command that pins it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calimon.calibration.io import StoredMap, load_map, map_from_document
from calimon.deploy.policy_file import Pin, PinnedMonitor, Policy, load_policy, save_policy
from calimon.errors import InputError
from calimon.provenance import meet

_MONITOR_KEYS = tuple(PinnedMonitor.model_fields)


@dataclass(frozen=True)
class ResolvedPolicy:
    """A policy with what it decides with: its file's sha256, the map its score goes through
    (None for ``p_raw``; ``map_source``: ``POLICY#pin.map``, or the file ``force`` applied),
    the prompt to build the monitor with, and the mismatches ``force`` let through so far."""

    policy: Policy
    path: str
    sha256: str
    stored_map: StoredMap | None
    map_source: str | None
    prompt: str
    forced: tuple[str, ...] = ()

    @property
    def monitor(self) -> PinnedMonitor:
        """The monitor the policy was designed for (its pin)."""
        assert self.policy.pin is not None and self.policy.pin.monitor is not None
        return self.policy.pin.monitor

    def meet(self, built: dict[str, Any], *, force: bool = False) -> list[str]:
        """Check a built monitor (`monitor_identity`) against the pinned one and the map's
        provenance; returns every mismatch let through (these and the resolver's), else raises
        naming the first piece that differs."""
        found = list(self.forced)
        found += meet("escalation policy", self.monitor.model_dump(), built, force=force,
                      path=self.path, against="monitor")
        if self.stored_map is not None:
            found += meet("calibration map", self.stored_map.extra, built, force=force,
                          path=self.map_source, against="monitor")
        return list(dict.fromkeys(found))


def monitor_identity(monitor: Any, defenses: tuple[str, ...] = ()) -> dict[str, Any]:
    """What identifies a built monitor's readings (`calimon.provenance.CHECKED`)."""
    key = monitor.key
    return {"model": key.model, "model_revision": key.model_revision, "prompt": key.prompt,
            "template_hash": key.template_hash, "readout": key.readout,
            "defenses": list(defenses)}


def resolve_policy(path: str | Path, *, calibration_map: str | Path | None = None,
                   prompt: str | None = None, force: bool = False) -> ResolvedPolicy:
    """Read a policy file and what it pins (module docstring). ``calibration_map`` /
    ``prompt``: given beside the policy, they must be the pinned ones (``force``: applied
    anyway, recorded)."""
    p = Path(path)
    policy = load_policy(p)
    where = str(p)
    for key in ("model", "readout"):
        if getattr(policy, key) == "unknown":
            raise InputError(f"the policy names no {key} (its design run did not record one): "
                             f"re-run calimon escalate with --{key}", path=where, field=key)
    pin = policy.pin
    if pin is None:
        raise InputError(f"policy {policy.name!r} is version 1: it names its design run by a "
                         "path and carries no calibration map, so its decisions would depend "
                         f"on the folder it is read from; pin it with `calimon pin-policy {p} "
                         "--run DESIGN_RUN` (docs/deployment.md)", path=where, field="version")
    if pin.monitor is None:
        raise InputError(f"policy {policy.name!r} pins no monitor (its design run recorded no "
                         "prompt): re-run calimon escalate on the run folder `calimon curve` "
                         "wrote", path=where, field="pin.monitor")
    source = policy.provenance.get("source_sha256")
    if source is not None and source != pin.design_run_sha256:
        raise InputError(f"the pinned design run sha256 {pin.design_run_sha256} is not the "
                         f"provenance's source_sha256 {source}", path=where,
                         field="pin.design_run_sha256")
    forced = meet("escalation policy", {"model": policy.model, "readout": policy.readout},
                  pin.monitor.model_dump(), force=force, path=where, against="pinned monitor")
    stored = _pinned_map(policy, where)
    source_name = f"{p}#pin.map" if stored is not None else None
    if calibration_map is not None:
        stored, more = _given_map(policy, stored, Path(calibration_map), force, where)
        forced += more
        source_name = source_name if not more else str(calibration_map)
    if prompt is not None and prompt != pin.monitor.prompt:
        msg = f"prompt {prompt!r} is not the pinned prompt {pin.monitor.prompt!r}"
        if not force:
            raise InputError(msg + " (--force applies it anyway, recorded)", path=where,
                             field="prompt")
        forced.append(msg)
    return ResolvedPolicy(policy, where, hashlib.sha256(p.read_bytes()).hexdigest(), stored,
                          source_name, prompt or pin.monitor.prompt, tuple(forced))


def _pinned_map(policy: Policy, where: str) -> StoredMap | None:
    """The map a policy pins, checked against its digest, its method and the pinned monitor;
    None for a ``p_raw`` policy."""
    pin = policy.pin
    assert pin is not None and pin.monitor is not None
    if policy.score == "p_raw":
        if pin.map is not None:
            raise InputError(f"policy {policy.name!r} reads p_raw (calibration 'none') but pins "
                             "a map", path=where, field="pin.map")
        return None
    if pin.map is None:
        raise InputError(f"policy {policy.name!r} reads p_cal through a "
                         f"{policy.calibration!r} map but pins none (its design run had no "
                         f"calibration/{policy.calibration}.json): re-run calimon escalate on "
                         "the run folder that fitted the map", path=where, field="pin.map")
    stored = map_from_document(pin.map, where, prefix="pin.map.")
    if stored.digest() != pin.map_sha256:
        raise InputError(f"the pinned map's digest is {stored.digest()}, the policy records "
                         f"{pin.map_sha256}: the map was changed after it was pinned",
                         path=where, field="pin.map_sha256")
    if stored.method != policy.calibration:
        raise InputError(f"the pinned map is a {stored.method!r} map; the policy reads "
                         f"{policy.calibration!r}", path=where, field="pin.map.method")
    meet("calibration map", stored.extra, pin.monitor.model_dump(), path=where,
         against="pinned monitor")
    return stored


def _given_map(policy: Policy, pinned: StoredMap | None, given_path: Path, force: bool,
               where: str) -> tuple[StoredMap, list[str]]:
    """A map given beside the policy: the pinned one (nothing to record), or refused (``force``:
    applied, and the difference recorded)."""
    if policy.score == "p_raw":
        raise InputError(f"policy {policy.name!r} reads p_raw (calibration 'none'): it applies "
                         "no map", path=where, field="calibration_map")
    given = load_map(given_path)
    assert pinned is not None
    if given.digest() == pinned.digest():
        return pinned, []
    msg = (f"the map given ({given_path}: {given.method}, fit set {given.fit_set_hash}) is not "
           f"the one the policy pins ({pinned.method}, fit set {pinned.fit_set_hash})")
    if not force:
        raise InputError(msg + " (--force applies it anyway, recorded)", path=where,
                         field="calibration_map")
    return given, [msg]


def pin_from_run(csv_path: Path, *, score: str, calibration: str,
                 run: dict[str, Any]) -> Pin:
    """The pin of a policy designed on ``csv_path`` (``run``: its curve.json provenance, {}
    when none): the map its score went through (``calibration/<method>.json`` beside the CSV,
    for ``p_cal``), the monitor the run (else the map) recorded, the CSV's sha256."""
    from calimon.deploy.io import file_sha256

    stored = None
    if score == "p_cal":
        path = Path(csv_path).parent / "calibration" / f"{calibration}.json"
        stored = load_map(path) if path.is_file() else None
    recorded = {**(stored.extra if stored is not None else {}),
                **{k: v for k, v in run.items() if v is not None}}
    monitor = None
    if all(isinstance(recorded.get(k), str) and recorded[k] for k in ("model", "prompt",
                                                                     "readout")):
        monitor = PinnedMonitor(**{k: recorded[k] for k in _MONITOR_KEYS
                                   if recorded.get(k) is not None and k != "truncation"},
                                truncation=recorded_truncation(run))
    return Pin(design_run_sha256=file_sha256(csv_path), monitor=monitor,
               map=stored.document() if stored is not None else None,
               map_sha256=stored.digest() if stored is not None else None)


def recorded_truncation(run: dict[str, Any]) -> str:
    """The truncation policy a design run recorded (`calimon.scoring.windows.truncation_record`)
    as the ``--truncation`` text that builds it; ``head_tail`` when it recorded none."""
    record = run.get("truncation") or {}
    if not isinstance(record, dict) or record.get("policy") != "window":
        return "head_tail"
    return f"window:{record.get('aggregate', 'max')}:{record.get('overlap', 0.25)}"


def pin_policy(policy_path: str | Path, run: str | Path,
               out: str | Path | None = None) -> Policy:
    """Pin a version-1 policy (the migration to version 2): its design run ``run`` (a run
    folder or its scored CSV, which must be the file the policy's provenance hashed) gives the
    map and the monitor; the thresholds stay as they are. Written to ``out`` (default: in
    place)."""
    from calimon.deploy.design import run_provenance
    from calimon.deploy.io import file_sha256, resolve_run

    policy = load_policy(policy_path)
    if policy.pin is not None:
        raise InputError(f"policy {policy.name!r} is already pinned (version 2)",
                         path=str(policy_path), field="version")
    csv_path = resolve_run(run)
    want, got = policy.provenance.get("source_sha256"), file_sha256(csv_path)
    if want is not None and want != got:
        raise InputError(f"{csv_path} is not the design run of policy {policy.name!r}: its "
                         f"sha256 is {got}, the policy's provenance source_sha256 {want}",
                         path=str(policy_path), field="provenance.source_sha256")
    pin = pin_from_run(csv_path, score=policy.score, calibration=policy.calibration,
                       run=run_provenance(csv_path.parent))
    if pin.monitor is None or (policy.score == "p_cal" and pin.map is None):
        missing = ("the monitor it scored with (no curve.json)" if pin.monitor is None else
                   f"calibration/{policy.calibration}.json")
        raise InputError(f"{csv_path.parent} does not record {missing}: nothing to pin",
                         path=str(run), field="run")
    pinned = Policy(**{**policy.model_dump(), "version": 2, "pin": pin.model_dump()})
    save_policy(pinned, out or policy_path)
    return pinned


__all__ = ["ResolvedPolicy", "monitor_identity", "pin_from_run", "pin_policy",
           "resolve_policy"]
