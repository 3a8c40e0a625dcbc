"""``python -m calimon ...`` and the ``calimon`` console script: the same commands.

`main` imports the command line inside its own guard, so that Ctrl-C at any moment, during
the imports of the first second included, exits 130 (`ExitCode.INTERRUPTED`) with one line
on stderr and no traceback. A command that says itself what an interruption kept (a scoring
run: ``interrupted: N readings kept in the store ...``, added as a note to the
KeyboardInterrupt) is not followed by a second line."""

from __future__ import annotations

import sys


def _said(exc: BaseException | None) -> bool:
    """Whether the KeyboardInterrupt behind ``exc`` already carries the line a command
    printed about it (`BaseException.add_note`)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyboardInterrupt):
            return bool(getattr(exc, "__notes__", None))
        exc = exc.__cause__ or exc.__context__
    return False


def _interrupted(said: bool) -> None:
    import signal

    from calimon.errors import ExitCode

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    if not said:
        sys.stderr.write("calimon: interrupted\n")
        sys.stderr.flush()
    sys.exit(ExitCode.INTERRUPTED)


def main() -> None:
    """Run the command line (``sys.argv``); Ctrl-C exits 130 quietly, with one line."""
    try:
        from calimon.cli import app

        app(prog_name="calimon")
    except KeyboardInterrupt as exc:
        _interrupted(_said(exc))
    except SystemExit as exc:
        if exc.code == 130:  # typer turns a Ctrl-C inside a command into exit 130
            _interrupted(_said(exc))
        raise


if __name__ == "__main__":
    main()
