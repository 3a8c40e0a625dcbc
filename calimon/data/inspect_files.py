"""Inspect's log files without inspect_ai: a folder's logs as Inspect lists them, and a complete
``.eval`` log read directly, with the json module, for what `calimon.data.inspect_log` converts
(no pydantic validation of every sample and no import of inspect_ai: importing it and validating
1,000 samples took most of a `calimon curve` on such a log).

An ``.eval`` log is a zip: ``header.json`` (the log's version, status and ``EvalSpec``) and one
``samples/<id>_epoch_<n>.json`` per sample. Only a log this reader knows is read here: a ``.eval``
file whose ``header.json`` has a version in `KNOWN_VERSIONS`, status ``success`` and is not
invalidated; for anything else (a ``.json`` log, an unfinished or unknown one, a member it cannot
decompress or parse) `read_eval_zip` returns None and the caller reads the log with Inspect's own
reader. Each sample keeps the fields the converter reads (id, epoch, input, messages, scores,
metadata, error), as light objects with the attributes of Inspect's ``EvalSample``, its messages'
``text`` computed as Inspect computes it, and ``attachment://`` references resolved where
Inspect's reader resolves them (message text, and the tool calls of a message whose content is a
list). tests/test_inspect_log.py checks that both readers give the same samples.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

KNOWN_VERSIONS = (2,)
ATTACHMENT = "attachment://"
OLD_ATTACHMENT = "tc://"  # an earlier name of the same protocol, which Inspect migrates
LOG_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}[:-]\d{2}[:-]\d{2}")  # Inspect's log_file_pattern


def folder_logs(folder: Path) -> list[Path]:
    """The logs in a folder and its sub-folders as Inspect's listing (``list_eval_logs``) finds
    them, sorted by path: every ``.eval`` file, and every ``.json`` file whose name starts with
    the timestamp Inspect gives its logs (``2025-01-31T12-00-00...``)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and (
        p.suffix == ".eval" or (p.suffix == ".json" and LOG_NAME.match(p.name))))


def _zstd_zipfile() -> None:
    """Let zipfile read zstd members (Inspect writes them) before Python 3.14, with the package
    Inspect itself uses for it."""
    if sys.version_info < (3, 14):
        import zipfile_zstd  # noqa: F401  (patches zipfile on import)


def read_eval_zip(path: Path) -> tuple[Any, list[Any]] | None:
    """The header and the samples (in the dataset's order: sample ids, then epochs) of a complete
    ``.eval`` log this reader knows, or None (module docstring)."""
    if path.suffix != ".eval":
        return None
    try:
        _zstd_zipfile()
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if "header.json" not in names:
                return None
            raw = json.loads(z.read("header.json"))
            if (raw.get("version") not in KNOWN_VERSIONS or raw.get("status") != "success"
                    or raw.get("invalidated")):
                return None
            samples = [_sample(json.loads(z.read(name))) for name in z.namelist()
                       if name.startswith("samples/") and name.endswith(".json")]
    except Exception:  # anything unexpected: Inspect's reader reads it (or names the problem)
        return None
    header = _header(raw)
    order = {sid: i for i, sid in enumerate(header.eval.dataset.sample_ids or ())}
    return header, sorted(samples, key=lambda es: (order.get(es.id, len(order)), es.epoch))


def _header(raw: dict[str, Any]) -> Any:
    """The header's fields the converter reads, as attributes (``header.eval.eval_id``...)."""
    ev = raw["eval"]
    dataset = SimpleNamespace(sample_ids=(ev.get("dataset") or {}).get("sample_ids"))
    config = SimpleNamespace(epochs=(ev.get("config") or {}).get("epochs"))
    spec = SimpleNamespace(eval_id=ev["eval_id"], run_id=ev["run_id"], task=ev["task"],
                           metadata=ev.get("metadata"), dataset=dataset, config=config)
    return SimpleNamespace(status=raw["status"], invalidated=bool(raw.get("invalidated")),
                           eval=spec)


def _sample(raw: dict[str, Any]) -> Any:
    """One sample's fields, its references to attachments resolved as Inspect resolves them."""
    attachments = raw.get("attachments") or {}
    value = raw["input"]
    given = value if isinstance(value, str) else [Message(m, attachments) for m in value]
    error = raw.get("error")
    scores = {name: SimpleNamespace(value=score.get("value"))
              for name, score in (raw.get("scores") or {}).items()}
    return SimpleNamespace(id=raw["id"], epoch=raw["epoch"], input=given,
                           messages=[Message(m, attachments) for m in raw.get("messages") or []],
                           scores=scores, metadata=raw.get("metadata") or {},
                           error=None if error is None else SimpleNamespace(
                               message=error.get("message")))


class Message:
    """A chat message's fields that the converter reads, with Inspect's ``text``."""

    __slots__ = ("content", "error", "function", "metadata", "role", "tool_calls")

    def __init__(self, raw: dict[str, Any], attachments: dict[str, str]) -> None:
        self.role = raw["role"]
        self.metadata = raw.get("metadata")
        self.function = raw.get("function")
        error = raw.get("error")
        self.error = None if error is None else SimpleNamespace(type=error.get("type"),
                                                               message=error.get("message"))
        content = raw.get("content")
        calls = raw.get("tool_calls")
        if isinstance(content, str):
            self.content: Any = _resolve(content, attachments)
        else:  # Inspect resolves a list's text parts, and then the tool calls' arguments
            content = [dict(c, text=_resolve(c["text"], attachments)) if c.get("type") == "text"
                       else c for c in content or []]
            calls = [dict(c, arguments=_walk(c.get("arguments") or {}, attachments))
                     for c in calls or []] or None
            self.content = content
        self.tool_calls = [SimpleNamespace(function=c.get("function"),
                                           arguments=c.get("arguments"),
                                           parse_error=c.get("parse_error"))
                           for c in calls or []] or None

    @property
    def text(self) -> str:
        """The text content: the string, or the text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(c["text"] for c in self.content if c.get("type") == "text")


def _resolve(text: str, attachments: dict[str, str]) -> str:
    """A string with its attachment reference (if it is one, and known) replaced."""
    if text.startswith(OLD_ATTACHMENT):
        text = text.replace(OLD_ATTACHMENT, ATTACHMENT, 1)
    if text.startswith(ATTACHMENT):
        return attachments.get(text[len(ATTACHMENT):], text)
    return text


def _walk(value: Any, attachments: dict[str, str]) -> Any:
    """Every string in a JSON value resolved (tool-call arguments)."""
    if isinstance(value, str):
        return _resolve(value, attachments)
    if isinstance(value, list):
        return [_walk(v, attachments) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, attachments) for k, v in value.items()}
    return value


__all__ = ["KNOWN_VERSIONS", "Message", "folder_logs", "read_eval_zip"]
