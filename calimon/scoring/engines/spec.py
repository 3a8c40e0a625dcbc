"""`MonitorSpec`: the plain, JSON-able description of a monitor (backend name, model, backend
options, prompt, readout, decoding) that any engine, a remote Ray worker included, rebuilds the same
monitor from; and `make_monitor`, the one constructor of a monitor for any readout name."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from calimon.prompts import PromptTemplate


@dataclass(frozen=True)
class MonitorSpec:
    """Everything needed to rebuild a monitor anywhere: `options` are the backend's options
    (JSON values only, checked by the backend's options model, e.g. {"device": "cpu"} or
    {"base_url": "http://..."}); `decoding` is the binary readout's (`calimon.decoding`);
    `defenses` the prompt's (`calimon.defenses`, canonical order; part of the template hash).
    ``offline``: answer from the run store only (`calimon.scoring.backends.offline`: the backend is
    never called, a server never contacted); not part of the backend's identity. ``force``: a
    probe head or bundle made for another model revision, prompt or defense scores anyway
    (`calimon.scoring.probes.monitor.ProbeMonitor`, what differed recorded in its readings).
    ``truncation``: how a transcript over the input limit is read, ``head_tail`` (its middle
    cut) or ``window[:max|mean[:OVERLAP]]`` (overlapping windows, `calimon.scoring.windows`)."""

    model: str = "smollm2-135m"
    backend: str = "transformers"
    prompt: str = "direct"
    readout: str = "verdict"
    options: dict[str, Any] = field(default_factory=dict, hash=False)
    max_input_tokens: int | None = None
    decoding: str = "free"
    defenses: tuple[str, ...] = ()
    offline: bool = False
    force: bool = False
    truncation: str = "head_tail"

    def to_json(self) -> str:
        """The spec as a JSON string (sorted keys), for `from_json`."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MonitorSpec:
        """The spec a `to_json` string describes."""
        d = json.loads(text)
        return cls(**{**d, "defenses": tuple(d.get("defenses", ()))})

    def with_monitor(self, prompt: str, readout: str, decoding: str = "free") -> MonitorSpec:
        """The same backend with another prompt, readout and decoding."""
        return replace(self, prompt=prompt, readout=readout, decoding=decoding)

    def build_backend(self, *, shared: bool = True, reach: bool = True):
        """The backend a study scores with (`calimon.scoring.backends.build_backend`: the one place
        backends are made; ``shared``: the process's one backend for this spec). Unless
        ``offline`` (or ``reach=False``, for a caller that checks other things first), a
        remote backend's server must answer (`calimon.scoring.backends.offline.check_reachable`: an
        error naming its URL)."""
        from calimon.scoring.backends import build_backend
        from calimon.scoring.backends.offline import check_reachable

        backend = build_backend(self, shared=shared)
        if reach and not self.offline:
            check_reachable(backend)
        return backend

    def build(self, backend=None):
        """The monitor (the backend is created lazily: no weights load until it scores)."""
        from calimon.prompts import load_prompt

        kwargs = {"max_input_tokens": self.max_input_tokens} if self.max_input_tokens else {}
        if self.decoding != "free":
            kwargs["decoding"] = self.decoding
        if self.force and self.readout.startswith("probe:"):
            kwargs["force"] = True
        monitor = make_monitor(backend if backend is not None else self.build_backend(),
                               load_prompt(self.prompt).with_defenses(self.defenses),
                               self.readout, **kwargs)
        if self.truncation == "head_tail":
            return monitor
        from calimon.scoring.windows import WindowedMonitor, parse_truncation

        return WindowedMonitor(monitor, parse_truncation(self.truncation))


def make_monitor(backend, prompt: PromptTemplate, readout: str, **kwargs):
    """A monitor for any readout name: verdict, json, binary, or probe:<head name> (a probe head
    needs a backend with hidden states); ``decoding="json"`` (binary only) goes to `Monitor`.
    A ``score:NAME`` readout has no monitor to make: the data holds its scores."""
    from calimon.score_readout import is_score_readout

    if is_score_readout(readout):
        from calimon.errors import InputError

        raise InputError(f"{readout!r} reads the scores the benchmark holds, no model scores "
                         "it: `calimon curve --readout score:NAME` (and the deployment commands "
                         "on its run folder) take it", field="readout")
    if readout.startswith("probe:"):
        from calimon.scoring.backends import HiddenStates, requires
        from calimon.scoring.probes.monitor import ProbeMonitor

        requires(backend, HiddenStates, needed_for=f"readout {readout!r}")
        return ProbeMonitor(backend, prompt, head=readout.split(":", 1)[1], **kwargs)
    from calimon.scoring.monitor import Monitor

    return Monitor(backend, prompt, readout, **kwargs)
