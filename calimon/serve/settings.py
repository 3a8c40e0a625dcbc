"""`ServeSettings`: everything `calimon serve` is started with, in one frozen record (the CLI
builds it from its flags; tests and the benchmark build it directly)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from calimon.errors import InputError
from calimon.review.settings import ReviewSettings
from calimon.scoring.engines.settings import BackendSettings

API_KEY_ENV = "CALIMON_API_KEY"
DEFAULT_LOG = Path("runs/serve/decisions.sqlite")


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one request may hold. ``max_body_bytes``: the raw body (413 over it);
    ``max_chars``: the characters of one transcript (a session's whole trajectory included);
    ``max_messages``: chat messages per request; ``max_sessions``: sessions kept at once (the
    least recently used one is forgotten past it)."""

    max_body_bytes: int = 1 << 20
    max_chars: int = 200_000
    max_messages: int = 1000
    max_sessions: int = 1000

    def __post_init__(self):
        for name in ("max_body_bytes", "max_chars", "max_messages", "max_sessions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"expected a whole number >= 1, got {value!r}", field=name)


@dataclass(frozen=True, kw_only=True)
class Batching:
    """How requests are gathered. On the transformers backend, requests arriving within
    ``wait_ms`` of the first one of a batch (at most ``max_batch``) are scored in one monitor
    call, ``pass_rows`` transcripts per forward pass (None: the whole gathered batch in one
    pass, within the backend's ``batch_tokens``; the backend packs prompts of different lengths
    without padding, and a shared pass measured faster than one pass per transcript even on 2
    CPU cores, benchmarks/results/serve.md); other backends get up to ``max_batch`` requests in
    flight at once. ``max_queue``: requests waiting or running; one more is refused with 429
    and Retry-After."""

    max_batch: int = 32
    wait_ms: float = 5.0
    max_queue: int = 256
    pass_rows: int | None = None

    def __post_init__(self):
        if isinstance(self.max_batch, bool) or self.max_batch < 1:
            raise InputError(f"expected >= 1, got {self.max_batch!r}", field="max_batch")
        if not 0 <= self.wait_ms <= 10_000:
            raise InputError(f"expected 0 to 10000 ms, got {self.wait_ms!r}", field="wait_ms")
        if isinstance(self.max_queue, bool) or self.max_queue < 1:
            raise InputError(f"expected >= 1, got {self.max_queue!r}", field="max_queue")
        if self.pass_rows is not None and (isinstance(self.pass_rows, bool)
                                           or self.pass_rows < 1):
            raise InputError(f"expected >= 1, got {self.pass_rows!r}", field="pass_rows")


@dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """A `calimon serve` process: the policy, the monitor's map, prompt and ``truncation``
    policy (``None``: the ones the policy pins; a map or prompt given must be the pinned one),
    the backend, the decision log, the address and the limits. ``api_key``: None reads
    ``$CALIMON_API_KEY`` (empty: no key).
    ``keys_file``: keys with a name each (`calimon.serve.keys`); ``review``: the review queue,
    live recertification and drift watch (None: off, and no transcript text is kept).
    ``prefix_pool_mib``: ended sessions' caches a new session may start from
    (`calimon.serve.prefixes`; 0: sessions never start from each other's).
    ``shadow``: a candidate policy scored and logged beside the live one, never answered
    (`calimon.serve.policies`). ``deployment``: the name of the servers sharing this decision
    log as one service, whose ``/metrics`` give their totals
    (`calimon.serve.deployment_metrics`; None: this server's). ``access_log``: one line per
    request on stderr (uvicorn's, or Ray Serve's with replicas); the decision log records every
    decision either way."""

    policy: Path
    calibration_map: Path | None = None
    prompt: str | None = None
    max_input_tokens: int | None = None
    truncation: str | None = None
    force: bool = False
    backend: BackendSettings = field(default_factory=BackendSettings)
    log: str = str(DEFAULT_LOG)
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    batching: Batching = field(default_factory=Batching)
    limits: Limits = field(default_factory=Limits)
    session_memory_mib: float = 512.0
    prefix_pool_mib: float = 256.0
    keys_file: Path | None = None
    review: ReviewSettings | None = None
    shadow: Path | None = None
    deployment: str | None = None
    access_log: bool = True

    def __post_init__(self):
        if isinstance(self.prefix_pool_mib, bool) or not self.prefix_pool_mib >= 0:
            raise InputError(f"expected >= 0, got {self.prefix_pool_mib!r}",
                             field="prefix_pool_mib")
        if self.deployment is not None and not 0 < len(self.deployment) <= 100:
            raise InputError(f"expected a name of 1 to 100 characters, got "
                             f"{self.deployment!r}", field="deployment")

    def key(self) -> str | None:
        """The API key clients must send (None: none required)."""
        key = self.api_key if self.api_key is not None else os.environ.get(API_KEY_ENV, "")
        return key or None

    def check_exposure(self) -> None:
        """Refuse to listen beyond this machine without an API key."""
        if not is_loopback(self.host) and self.key() is None and self.keys_file is None:
            raise InputError(f"--host {self.host} is reachable from other machines: set an API "
                             f"key in ${API_KEY_ENV} (clients send 'Authorization: Bearer "
                             "KEY'), or listen on 127.0.0.1", field="host")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
