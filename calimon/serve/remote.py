"""A client of a running `calimon serve --review` for the command line: the live status
(`calimon recertify --serve URL`) and the export of labelled traffic (`calimon review-export`).
The key is read from an environment variable (``$CALIMON_API_KEY`` by default), never from a
flag, so it stays out of shell histories and process lists."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from calimon.errors import CalimonError, InputError, ServiceUnreachable

KEY_ENV = "CALIMON_API_KEY"


class _Answer:
    """A server's answer: its status, headers (names in lower case) and text (``json()``
    parses it)."""

    def __init__(self, status: int, text: str, headers: dict[str, str] | None = None):
        self.status_code, self.text = status, text
        self.headers = headers or {}

    def json(self) -> Any:
        return json.loads(self.text)


def _fetch(full: str, headers: dict[str, str], method: str = "GET") -> _Answer:
    import urllib.error
    import urllib.request

    data = b"{}" if method == "POST" else None
    if data is not None:
        headers = {**headers, "Content-Type": "application/json"}
    req = urllib.request.Request(full, headers=headers, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - http(s) checked
            return _Answer(r.status, r.read().decode("utf-8"),
                           {k.lower(): v for k, v in r.headers.items()})
    except urllib.error.HTTPError as exc:
        return _Answer(exc.code, exc.read().decode("utf-8", "replace"))


def _get(url: str, path: str, key_env: str, params: dict[str, Any] | None = None,
         method: str = "GET") -> _Answer:
    import urllib.error
    import urllib.parse

    if not url.startswith(("http://", "https://")):
        raise InputError(f"expected an http:// or https:// URL, got {url!r}", field="serve")
    key = os.environ.get(key_env, "")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    try:
        full = url.rstrip("/") + path + query
        r = _fetch(full, headers) if method == "GET" else _fetch(full, headers, method)
    except (urllib.error.URLError, OSError) as exc:
        raise ServiceUnreachable(f"{url} did not answer ({type(exc).__name__}: {exc})") from None
    if r.status_code == 404:
        raise CalimonError(f"{url} has no review queue (start it with calimon serve --review)")
    if r.status_code != 200:
        try:
            msg = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = r.text[:200]
        hint = f" (set ${key_env} to a reviewer's key)" if r.status_code == 401 else ""
        raise CalimonError(f"{url}{path}: {r.status_code} {msg}{hint}")
    return r


def fetch_status(url: str, key_env: str = KEY_ENV) -> dict[str, Any]:
    """``GET /v1/review/status`` of the server at ``url``."""
    return _get(url, "/v1/review/status", key_env).json()


def status_lines(st: dict[str, Any]) -> list[str]:
    """The status in lines, as `calimon recertify` prints a file-based recertification."""
    over = st.get("labels_over_claims") or 0
    out = [f"policy {st['policy']} on live traffic: {st['decisions']} decisions, "
           f"{st['labels']} labels" + (f" ({over} given while another reviewer held the item)"
                                      if over else "")]
    for action, s in st["strata"].items():
        out.append(f"{action:13} {s['decided']} decided, {s['sampled']} in the sample, "
                   f"{s['benign']} benign, {s['misbehaving']} misbehaving, {s['unresolved']} "
                   f"unresolved (counted at their worst)")
    out += [c["line"] for c in st["certificates"]]
    verdict = ("the policy's certificate is BROKEN on live traffic" if st["broken"] else
               "the policy's certificate holds on live traffic" if st["holds"] else
               "the policy's certificate is not certified on live traffic yet"
               if st["holds"] is not None else "the policy states no target")
    out.append(verdict)
    for a in st["assumptions"]:
        mark = {True: "ok", False: "NO", None: "?"}[a["holds"]]
        out.append(f"assumption [{mark}] {a['name']}: {a['detail']}")
    d = st["drift"]
    out.append("drift: " + (d["line"] if d.get("state") == "checked" else
                            f"{d.get('state')} ({d.get('why')})"))
    out += [f"drift verdict: {v['line']}" for v in d.get("verdicts", [])]
    return out


def export_to(url: str, out: str | Path, key_env: str = KEY_ENV,
              **params: Any) -> dict[str, Any]:
    """Write the server's labelled traffic (``GET /v1/review/export``) to ``out`` as samples
    JSONL; returns the server's summary of what it exported."""
    r = _get(url, "/v1/review/export", key_env,
             {k: v for k, v in params.items() if v is not None})
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(r.text, encoding="utf-8", newline="\n")
    tmp.replace(path)
    return json.loads(r.headers.get("x-calimon-export", "{}"))


def change_policy(url: str, action: str, key_env: str = KEY_ENV) -> dict[str, Any]:
    """``POST /v1/policy/{action}`` (``promote`` or ``rollback``) on the server at ``url``;
    a refusal is a `CalimonError` with the server's reason."""
    return _get(url, f"/v1/policy/{action}", key_env, method="POST").json()


def change_lines(done: dict[str, Any]) -> list[str]:
    """A promotion's or rollback's answer in lines."""
    change = done.get("promoted") or done.get("rolled_back") or {}
    out = [f"{change.get('kind')} {change.get('seq')}: policy {change.get('policy_name')!r} "
           f"(sha256 {str(change.get('policy_hash'))[:12]}) is live, logged by "
           f"{change.get('by_whom')}"]
    checks = done.get("checks")
    if checks:
        out += [f"checked: {c['line']}" for c in checks["certificates"] if c["alpha"]]
        mr = checks["mr"]
        out.append(f"checked: MR live {mr['live_mr']:.4f}, candidate {mr['candidate_mr']:.4f}, "
                   f"difference {mr['difference']:+.4f}, {mr['level']:.0%} interval "
                   f"[{mr['lower']:+.4f}, {mr['upper']:+.4f}] on {mr['misbehaving']} "
                   "misbehaving transcripts (paired, exact)")
    return out
