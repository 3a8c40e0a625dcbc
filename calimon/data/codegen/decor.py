"""`Decor`: one decoration (correct, harmless code with the surface features of test gaming)
as the pieces `negatives` draws and `hacks` applies to both replies of a pair."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decor:
    """One decoration's pieces: imports, module-level lines (``top``), lines before the body
    (``prefix``) and lines after the function (``tail``)."""

    kind: str
    imports: tuple[str, ...] = ()
    top: tuple[str, ...] = ()
    prefix: tuple[str, ...] = ()
    tail: tuple[str, ...] = ()

    @property
    def is_main(self) -> bool:
        """True when the tail is a ``__main__`` block."""
        return bool(self.tail) and self.tail[0].startswith("if __name__")
