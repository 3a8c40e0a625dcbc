"""Open a page in headless Chromium and report what happened: console errors, uncaught
exceptions, blocked loads, values of JavaScript expressions, and a PNG screenshot.

Talks the DevTools protocol over ``--remote-debugging-pipe`` (file descriptors 3 and 4,
NUL-separated JSON), so it needs nothing beyond the standard library and a ``chromium`` binary.
Used by the report's browser test and by ``calimon report --screenshot``.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calimon.errors import CalimonError

BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--disable-extensions", "--mute-audio",
         "--remote-debugging-pipe")


class BrowserError(CalimonError):
    """Chromium is missing, did not start, or did not answer in time."""


def find_chromium() -> str | None:
    """Path of a Chromium binary ($CALIMON_CHROMIUM first), or None."""
    env = os.environ.get("CALIMON_CHROMIUM")
    if env:
        return env if Path(env).is_file() else shutil.which(env)
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass(frozen=True)
class PageCheck:
    """What the page did: ``errors`` holds console errors, uncaught exceptions and log
    entries of level error (blocked or failed loads, CSP violations)."""

    url: str
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    values: dict[str, Any] = field(default_factory=dict)
    screenshot: Path | None = None


class _Pipe:
    def __init__(self, proc: subprocess.Popen, write_fd: int, read_fd: int, timeout: float):
        self.proc, self.w, self.r, self.timeout = proc, write_fd, read_fd, timeout
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self.r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise BrowserError(f"Chromium closed the pipe (exit {self.proc.poll()})")
                self.buf += chunk
            elif self.proc.poll() is not None:
                raise BrowserError(f"Chromium exited with {self.proc.returncode}")
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        mid = self.next_id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == mid:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == method and e.get("sessionId") == session
                      for e in self.events):
            self.events.append(self._read_message(deadline))


def _console_text(params: dict) -> str:
    parts = []
    for a in params.get("args", []):
        parts.append(str(a.get("value", a.get("description", a.get("type")))))
    return " ".join(parts)


def _collect(events: list[dict]) -> tuple[list[str], list[str]]:
    errors, warnings = [], []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            errors.append("uncaught: " + str(d.get("exception", {}).get("description")
                                             or d.get("text")))
        elif m == "Runtime.consoleAPICalled":
            (errors if p.get("type") in ("error", "assert") else
             warnings if p.get("type") == "warning" else []).append(
                f"console.{p.get('type')}: {_console_text(p)}")
        elif m == "Log.entryAdded":
            entry = p.get("entry", {})
            text = f"{entry.get('source')}: {entry.get('text')} {entry.get('url') or ''}".strip()
            (errors if entry.get("level") == "error" else warnings if entry.get("level") ==
             "warning" else []).append(text)
    return errors, warnings


def _launch(exe: str, profile: str, width: int, height: int
            ) -> tuple[subprocess.Popen, int, int]:
    """Start Chromium with the DevTools protocol on a pipe: (process, fd the protocol reads
    from us, fd it writes to us)."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()

    def fds() -> None:  # in the child: the protocol reads fd 3 and writes fd 4
        a, b = os.dup(to_child_r), os.dup(from_child_w)  # copies first: a or b may be 3 or 4
        os.dup2(a, 3)
        os.dup2(b, 4)
        os.closerange(5, 1 << 16)

    proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}",
                             f"--window-size={width},{height}", "about:blank"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=fds, close_fds=False)
    os.close(to_child_r)
    os.close(from_child_w)
    return proc, to_child_w, from_child_r


def _open_page(pipe: _Pipe, url: str, width: int, height: int) -> str:
    """Attach to a new tab, size its viewport, load ``url``; returns the session id."""
    target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = pipe.send("Target.attachToTarget", {"targetId": target,
                                              "flatten": True})["sessionId"]
    for method in ("Runtime.enable", "Log.enable", "Page.enable"):
        pipe.send(method, session=sid)
    pipe.send("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        session=sid)
    pipe.send("Page.navigate", {"url": url}, session=sid)
    pipe.wait_for("Page.loadEventFired", sid)
    return sid


def _evaluate(pipe: _Pipe, sid: str, expressions: dict[str, str]) -> dict[str, Any]:
    """name -> JSON value of each expression, or ``{"error": text}`` where it threw."""
    values = {}
    for name, expr in expressions.items():
        res = pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                             "awaitPromise": True}, session=sid)
        if "exceptionDetails" in res:
            values[name] = {"error": res["exceptionDetails"].get("text")}
        else:
            values[name] = res.get("result", {}).get("value")
    return values


def _screenshot(pipe: _Pipe, sid: str, screenshot: str | Path, width: int,
                full_height: int | None) -> Path:
    """Write a PNG of the viewport (or of the top ``full_height`` pixels of the page)."""
    params: dict[str, Any] = {"format": "png"}
    if full_height:
        size = pipe.send("Page.getLayoutMetrics", session=sid)["cssContentSize"]
        h = min(int(size["height"]), full_height)
        params.update(captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": width, "height": h, "scale": 1})
    data = pipe.send("Page.captureScreenshot", params, session=sid)["data"]
    shot = Path(screenshot)
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.write_bytes(base64.b64decode(data))
    return shot


def _shut_down(proc: subprocess.Popen, fds: tuple[int, ...], profile: str) -> None:
    """Close our pipe ends, wait for Chromium (kill it after 10 s), remove its profile."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(profile, ignore_errors=True)


def check_page(path: str | Path, *, expressions: dict[str, str] | None = None,
               actions: list[str] | None = None, screenshot: str | Path | None = None,
               width: int = 1280, height: int = 900, full_height: int | None = None,
               timeout: float = 60.0, binary: str | None = None) -> PageCheck:
    """Load ``path`` (a local HTML file), run ``actions`` (JS statements, in order), then
    evaluate ``expressions`` (name -> JS expression, JSON-serializable results) and save a
    screenshot (the top ``full_height`` pixels of the page if given, else the viewport)."""
    exe = binary or find_chromium()
    if not exe or not (Path(exe).is_file() or shutil.which(exe)):
        raise BrowserError(f"no Chromium found{f' at {exe}' if exe else ''} (apt-get install "
                           "chromium, or set CALIMON_CHROMIUM)")
    url = Path(path).resolve().as_uri()
    profile = tempfile.mkdtemp(prefix="calimon-chromium-")
    proc, to_child_w, from_child_r = _launch(exe, profile, width, height)
    pipe = _Pipe(proc, to_child_w, from_child_r, timeout)
    try:
        sid = _open_page(pipe, url, width, height)
        for statement in actions or []:
            pipe.send("Runtime.evaluate", {"expression": statement, "awaitPromise": True},
                      session=sid)
        values = _evaluate(pipe, sid, expressions or {})
        shot = None
        if screenshot is not None:
            shot = _screenshot(pipe, sid, screenshot, width, full_height)
        time.sleep(0.2)  # let late console events arrive
        pipe.send("Runtime.evaluate", {"expression": "0"}, session=sid)
        errors, warnings = _collect(pipe.events)
        try:
            pipe.send("Browser.close")
        except BrowserError:
            pass
        return PageCheck(url=url, errors=tuple(errors), warnings=tuple(warnings),
                         values=values, screenshot=shot)
    finally:
        _shut_down(proc, (to_child_w, from_child_r), profile)


__all__ = ["BrowserError", "PageCheck", "check_page", "find_chromium"]
