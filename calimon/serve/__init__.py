"""`calimon serve`: a certified escalation policy applied to live traffic over HTTP.

One process loads the monitor a policy names (model, readout, calibration map, thresholds) and
answers `POST /v1/score` (one transcript) and `POST /v1/sessions/{id}/steps` (a trajectory,
step by step, each step costing its new tokens) with p_raw, p_cal, a decision and the audit
draw, logging every answer durably before it is sent (idempotent by request id). docs/serve.md
has the API, the fault behaviour and the measured figures.

Modules: `settings` (what a server is started with), `loading` (policy -> monitor), `batcher`
(the bounded queue, shared forward passes), `kv` and `sessions` (session caches), `steps`,
`service` (scoring once, the answer), `external` (a policy whose monitor's score comes with each
request), `decision_log` (with `pg_log`, the log in PostgreSQL; `log_writer`, its group commits),
`metrics`, `security`, `errors`, `schemas`, `messages`, `app` (the FastAPI routes), `runner`
(startup) and `ray_serve` (`--replicas N`: the app as a Ray Serve deployment). The review loop
is its own package, `calimon.review`, which `app` and `runner` attach.
"""

from __future__ import annotations

from calimon.serve.settings import Batching, Limits, ServeSettings

__all__ = ["Batching", "Limits", "ServeSettings"]
