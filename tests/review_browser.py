"""A headless Chromium a test drives like a person: open a page, type, press keys (real key
events through the DevTools protocol), wait for the page, read values, take screenshots.

Built on the pipe transport of `calimon.report.chromium` (the report's browser check), which
opens a file and reads it once; the review pages need a session that lives across navigations.
"""

from __future__ import annotations

import base64
import tempfile
import time
from pathlib import Path
from typing import Any

from calimon.report.chromium import (
    BrowserError,
    _collect,
    _launch,
    _open_page,
    _Pipe,
    _shut_down,
    find_chromium,
)

KEY_CODES = {"Enter": 13, "Escape": 27, "ArrowDown": 40, "ArrowUp": 38}


class Browser:
    """One tab of a headless Chromium at ``width`` x ``height`` (a context manager)."""

    def __init__(self, width: int = 1280, height: int = 800, timeout: float = 60.0):
        self.width, self.height, self.timeout = width, height, timeout
        self.profile = tempfile.mkdtemp(prefix="calimon-review-chromium-")
        exe = find_chromium()
        if exe is None:
            raise BrowserError("no Chromium found")
        self.proc, self.w, self.r = _launch(exe, self.profile, width, height)
        self.pipe = _Pipe(self.proc, self.w, self.r, timeout)
        self.sid: str | None = None

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.pipe.send("Browser.close")
        except BrowserError:
            pass
        _shut_down(self.proc, (self.w, self.r), self.profile)

    def open(self, url: str) -> None:
        """Load ``url`` in the tab (the first call opens it)."""
        if self.sid is None:
            self.sid = _open_page(self.pipe, url, self.width, self.height)
            return
        self.pipe.send("Page.navigate", {"url": url}, session=self.sid)
        self.wait("document.readyState === 'complete' && location.href.startsWith("
                  f"{url.split('#')[0]!r}.split('?')[0])")

    def eval(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression (awaited when it is a promise)."""
        res = self.pipe.send("Runtime.evaluate", {"expression": expression,
                                                  "returnByValue": True, "awaitPromise": True},
                             session=self.sid)
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression}: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    def wait(self, expression: str, timeout: float | None = None) -> Any:
        """Poll ``expression`` until it is truthy; its value. Raises after ``timeout``."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            try:
                value = self.eval(expression)
            except BrowserError:
                value = None  # the page is between two documents
            if value:
                return value
            time.sleep(0.1)
        raise BrowserError(f"timed out waiting for {expression}")

    def press(self, key: str) -> None:
        """Press and release one key (a character, or Enter, Escape, ArrowDown...)."""
        code = KEY_CODES.get(key, ord(key.upper()) if len(key) == 1 else 0)
        text = key if len(key) == 1 else ("\r" if key == "Enter" else "")
        down = {"type": "keyDown" if text else "rawKeyDown", "key": key,
                "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}
        if text:
            down["text"] = text
        self.pipe.send("Input.dispatchKeyEvent", down, session=self.sid)
        self.pipe.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": key,
                                                  "windowsVirtualKeyCode": code},
                       session=self.sid)

    def type(self, text: str) -> None:
        """Type ``text`` into the focused field."""
        self.pipe.send("Input.insertText", {"text": text}, session=self.sid)

    def screenshot(self, path: str | Path) -> Path:
        """A PNG of the viewport."""
        data = self.pipe.send("Page.captureScreenshot", {"format": "png"},
                              session=self.sid)["data"]
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen so far."""
        return _collect(self.pipe.events)[0]
