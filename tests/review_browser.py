"""A headless Chromium a test drives like a person: open a page (in one tab or several), type,
press keys (real key events through the DevTools protocol, Tab moving the focus), wait for the
page, read values, narrow the window, take screenshots, close a tab.

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

KEY_CODES = {"Enter": 13, "Escape": 27, "ArrowDown": 40, "ArrowUp": 38, "Tab": 9}


class Tab:
    """One tab of a `Browser` (the first call of `open` opens it)."""

    def __init__(self, pipe: _Pipe, width: int, height: int, timeout: float):
        self.pipe, self.width, self.height, self.timeout = pipe, width, height, timeout
        self.sid: str | None = None

    def close(self) -> None:
        """Close the tab, as a person closes it (its page's storage stays in the profile)."""
        if self.sid is not None:
            target = self.pipe.send("Target.getTargetInfo", session=self.sid)["targetInfo"]
            self.pipe.send("Target.closeTarget", {"targetId": target["targetId"]})
            self.sid = None

    def front(self) -> None:
        """Bring the tab to the front (where a person's keys go)."""
        self.pipe.send("Page.bringToFront", session=self.sid)

    def open(self, url: str) -> None:
        """Load ``url`` in the tab (the first call opens it)."""
        if self.sid is None:
            self.sid = _open_page(self.pipe, url, self.width, self.height)
            return
        self.pipe.send("Page.navigate", {"url": url}, session=self.sid)
        self.wait("document.readyState === 'complete' && location.href.startsWith("
                  f"{url.split('#')[0]!r}.split('?')[0])")

    def resize(self, width: int, height: int) -> None:
        """Resize the tab's viewport, as a person narrows the window."""
        self.width, self.height = width, height
        self.pipe.send("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=self.sid)

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


class Browser(Tab):
    """A headless Chromium at ``width`` x ``height`` with one profile (a context manager); it
    is its first tab, and `tab` opens more."""

    def __init__(self, width: int = 1280, height: int = 800, timeout: float = 60.0):
        self.profile = tempfile.mkdtemp(prefix="calimon-review-chromium-")
        exe = find_chromium()
        if exe is None:
            raise BrowserError("no Chromium found")
        self.proc, self.w, self.r = _launch(exe, self.profile, width, height)
        super().__init__(_Pipe(self.proc, self.w, self.r, timeout), width, height, timeout)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.pipe.send("Browser.close")
        except BrowserError:
            pass
        _shut_down(self.proc, (self.w, self.r), self.profile)

    def tab(self) -> Tab:
        """Another tab of the same browser and profile (cookies, localStorage)."""
        return Tab(self.pipe, self.width, self.height, self.timeout)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen so far (every tab)."""
        return _collect(self.pipe.events)[0]
