"""Exceptions raised by calimon. The CLI turns each into one line and a non-zero exit code,
one of `ExitCode` (the README's "Exit codes" table)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a calimon command's exit status means; each error class carries one."""

    OK = 0
    FAILURE = 1  # a runtime failure: a backend, the sandbox, the browser; an uncaught bug
    USAGE = 2  # usage or bad input: an option, a file, a row, a field, a config (click's too)
    INFEASIBLE = 3  # the input is fine but no result meets the constraints asked for
    MISSING = 4  # this machine lacks something: model weights, an optional extra, source files
    UNREACHABLE = 5  # a service (a model server, a calimon serve) did not answer
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it): one line, no traceback


class CalimonError(Exception):
    """Base class of every error calimon raises on purpose."""

    exit_code = ExitCode.FAILURE


def _printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``), so an error stays one line even when
    a file's own key or value carries a newline."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


class InputError(CalimonError):
    """Bad user input: a file, a row, a field or an argument that does not fit."""

    exit_code = ExitCode.USAGE

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
    """The weights of a configured model are not on this machine. Where the message says how
    the model was named (``{named_by}`` in ``message``), it reads ``--model`` unless
    ``named_by`` says otherwise (`named_as`: a policy's field, for `calimon serve`)."""

    exit_code = ExitCode.MISSING

    def __init__(self, message: str, *, named_by: str = "--model"):
        self.template = message
        super().__init__(message.replace("{named_by}", named_by))

    def named_as(self, named_by: str) -> ModelNotAvailableError:
        """The same error, the model named by ``named_by`` instead of ``--model``."""
        return type(self)(self.template, named_by=named_by)


class MissingExtraError(CalimonError):
    """An optional dependency is not installed; the message gives the pip line."""

    exit_code = ExitCode.MISSING


class DataSourceError(CalimonError):
    """A benchmark source file is missing or does not match its checksum."""

    exit_code = ExitCode.MISSING


class SandboxError(CalimonError):
    """Code could not be executed in the sandbox."""


class BackendError(CalimonError):
    """A model backend failed on a batch."""


class ServiceUnreachable(BackendError):
    """A server calimon talks to (an http or chat backend's, a `calimon serve`) did not answer
    at all: no connection, or no answer in time. A later run may succeed. (A `BackendError`,
    as it was before it had a code of its own.)"""

    exit_code = ExitCode.UNREACHABLE


class InvertedMapError(CalimonError):
    """A calibration map fitted decreasing, or a raw score ranking the wrong way on the set a
    map was fitted on: certifying on it would flag the transcripts least like misbehavior."""

    exit_code = ExitCode.FAILURE
