"""An externally scored policy on `calimon serve`: a policy whose monitor is an external one (its
design run read a ``score:NAME`` readout, `calimon.score_readout`, so it pins model
``external``) is served with no model: each request carries the monitor's raw score, in its own
units, in the field `FIELD`, and the server reads it through the readout (checked to be a finite
number in the readout's range, mapped onto [0, 1], turned around for ``direction=lower``: the
reading's ``p_raw``), then through the policy's calibration map and thresholds, as it reads a
model's confidence.

One policy never mixes the two: a request to an external policy without the score is 422
naming `FIELD`; a score sent to a policy whose monitor the server runs is 422 naming it too
(`check_score`). A shadow candidate beside an external live policy must be an external policy
reading the same score (the same ``NAME``; its range, direction, map and thresholds may
differ), and a candidate beside a policy the server runs must be one it runs too
(`check_pair`): anything else is refused when the server starts.

Nothing here imports torch or loads a model: `ExternalMonitor` stands where a model's monitor
would (its ``key`` names model, revision, prompt and template ``external``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from calimon.errors import InputError
from calimon.score_readout import EXTERNAL, ScoreReadout, is_score_readout
from calimon.scoring.store import MonitorKey
from calimon.serve.errors import ApiError
from calimon.verdict import Verdict

FIELD = "score"  # the request field that carries an external monitor's score


def is_external_pin(pinned: Any) -> bool:
    """Whether a policy's pinned monitor (`calimon.deploy.policy_file.PinnedMonitor`) is an
    external one: model ``external`` with a ``score:NAME`` readout."""
    return getattr(pinned, "model", None) == EXTERNAL


class ExternalBackend:
    """The backend of an external monitor: nothing runs here."""

    name = EXTERNAL
    model = None
    forward_calls = 0
    max_batch_size = 1


@dataclass
class ExternalMonitor:
    """An external monitor's readout, standing where a model's monitor would
    (`calimon.serve.loading.ServedMonitor.monitor`)."""

    readout: str
    parsed: ScoreReadout
    key: MonitorKey
    backend: ExternalBackend
    constraint: None = None

    @classmethod
    def of(cls, pinned: Any, where: str) -> ExternalMonitor:
        """The monitor a policy's pin names (``where``: the policy file, for errors)."""
        if not is_score_readout(pinned.readout):
            raise InputError(f"the pinned monitor is {EXTERNAL!r} but its readout "
                             f"{pinned.readout!r} is not score:NAME: re-run calimon escalate "
                             "on the run calimon curve --readout score:NAME wrote", path=where,
                             field="pin.monitor.readout")
        parsed = ScoreReadout.parse(pinned.readout, field="pin.monitor.readout")
        key = MonitorKey(EXTERNAL, EXTERNAL, EXTERNAL, EXTERNAL, pinned.readout)
        return cls(pinned.readout, parsed, key, ExternalBackend())

    def identity(self) -> dict[str, Any]:
        """What the policy's pin is checked against (`calimon.provenance.meet`): no revision or
        template of a model to compare."""
        return {"model": EXTERNAL, "model_revision": None, "prompt": EXTERNAL,
                "template_hash": None, "readout": self.readout, "defenses": []}

    def reading(self, value: float, transcript_hash: str, field: str = FIELD) -> Verdict:
        """The reading of a score a client sent (`ScoreReadout.to_p`); 422 naming ``field``
        when it is outside the readout's range."""
        try:
            p = self.parsed.to_p(value)
        except ValueError as exc:
            raise ApiError(422, "invalid_score", str(exc), field) from None
        return Verdict(transcript_hash=transcript_hash, readout=self.readout, status="ok",
                       p_raw=p, tokens=0)

    def score(self, samples: list) -> list[Verdict]:
        """An external monitor cannot read a transcript: its score comes with the request."""
        raise RuntimeError("an external monitor's score comes with each request")


def is_external(served: Any) -> bool:
    """Whether a loaded policy (`calimon.serve.loading.ServedMonitor`) is externally scored."""
    return isinstance(getattr(served, "monitor", None), ExternalMonitor)


def check_score(served: Any, score: float | None) -> None:
    """Refuse (422 naming `FIELD`) a request that does not fit the live policy: no score for
    an external policy, a score for a policy whose monitor the server runs."""
    if is_external(served):
        if score is None:
            readout = served.monitor.readout
            raise ApiError(422, "missing", f"Field required: this policy's monitor is external "
                           f"({readout}); send its score, in its own units, with each request",
                           FIELD)
    elif score is not None:
        raise ApiError(422, "unexpected_score", f"this policy's monitor is "
                       f"{served.monitor.key.model} ({served.monitor.key.readout}), run by this "
                       "server: send the transcript without a score", FIELD)


def describe(served: Any) -> str:
    """How a policy is scored, for start-up lines and errors."""
    if is_external(served):
        return f"an external monitor's {served.monitor.readout}"
    key = served.monitor.key
    return f"model {key.model} ({key.readout})"


def check_pair(live: Any, candidate: Any, path: str) -> None:
    """Refuse a shadow ``candidate`` (the policy at ``path``) that could not read the requests
    the ``live`` policy reads (module docstring)."""
    if is_external(live) and is_external(candidate):
        ours, theirs = live.monitor.parsed.name, candidate.monitor.parsed.name
        if ours != theirs:
            raise InputError(f"the shadow policy reads an external monitor's score {theirs!r} "
                             f"and the live policy's {ours!r}: each request carries one score "
                             f"({FIELD!r}), so a shadow beside an external policy must read the "
                             "same score (its range, direction, map and thresholds may differ)",
                             path=path, field="shadow")
        return
    if is_external(live) or is_external(candidate):
        raise InputError(f"the shadow policy is scored by {describe(candidate)} and the live "
                         f"policy by {describe(live)}: one policy never mixes the two (requests "
                         f"to an external policy carry its score in {FIELD!r}, requests to a "
                         "policy this server runs carry none), so a shadow must be scored as "
                         "the live policy is", path=path, field="shadow")


__all__ = ["FIELD", "ExternalBackend", "ExternalMonitor", "check_pair", "check_score",
           "describe", "is_external", "is_external_pin"]
