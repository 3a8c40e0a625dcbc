"""Exceptions raised by calimon. The CLI turns each into one line and a non-zero exit code."""

from __future__ import annotations


class CalimonError(Exception):
    """Base class of every error calimon raises on purpose."""

    exit_code = 1


def _printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``), so an error stays one line even when
    a file's own key or value carries a newline."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


class InputError(CalimonError):
    """Bad user input: a file, a row, a field or an argument that does not fit."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.path, self.line, self.field = path, line, field
        where, shown = "", None if field is None else _printable(str(field))
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
            if field is not None:
                where += f": field '{shown}'"
            where += ": "
        elif field is not None:
            where = f"field '{shown}': "
        super().__init__(where + _printable(message))


class ConfigError(InputError):
    """A YAML config (model, prompt, monitor, policy) is missing or invalid."""


class ModelNotAvailableError(CalimonError):
    """The weights of a configured model are not on this machine."""

    exit_code = 2


class MissingExtraError(CalimonError):
    """An optional dependency is not installed; the message gives the pip line."""

    exit_code = 2


class DataSourceError(CalimonError):
    """A benchmark source file is missing or does not match its checksum."""

    exit_code = 2


class SandboxError(CalimonError):
    """Code could not be executed in the sandbox."""


class BackendError(CalimonError):
    """A model backend failed on a batch."""


class InvertedMapError(CalimonError):
    """A calibration map fitted decreasing, or a raw score ranking the wrong way on the set a
    map was fitted on: certifying on it would flag the transcripts least like misbehavior."""

    exit_code = 1
