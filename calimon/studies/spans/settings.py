"""`SpanSettings`: a span-localization study's settings, composed from `RunSettings` (monitor,
benchmark, budget, seed, store, backend and engine flags), and the command line that
reproduces them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from calimon.errors import InputError
from calimon.numerics.segments import DEFAULT_MASK
from calimon.scoring.engines import RunSettings
from calimon.studies.spans.occlusion import MAX_SEGMENTS, TOP_K

DIRECTIONS = ("raw", "flipped", "auto")
CONFIDENCE_READOUTS = ("verdict", "json")
_NOT_FLAGS = ("mask", "out")  # library-only fields, and the folder (always printed last)


@dataclass(frozen=True, kw_only=True)
class SpanSettings(RunSettings):
    """A span study on ``split`` (None: every labelled sample): the confidence monitor whose
    drops are read (`RunSettings`' prompt and readout), the quote monitor, the sign of a span
    score (``direction``), ``top_k`` spans per sample out of at most ``max_segments`` units,
    the mask, whether masked variants share each sample's prefix, and the extra span methods
    (copy-constrained quotes, a token head)."""

    split: str | None = "test"
    quotes: bool = True
    quote_prompt: str = "evidence"
    copy_quotes: bool = False  # also copy-constrained quotes (calimon.studies.spans.copy_generation)
    token_head: str | None = None  # also a token probe head's spans (a head name)
    direction: str = "raw"
    top_k: int = TOP_K
    max_segments: int = MAX_SEGMENTS
    mask: str = DEFAULT_MASK
    share_prefix: bool = True
    out: Path | None = None  # the CLI's run folder (default runs/spans-<benchmark>-<split>)

    def check(self) -> None:
        """Raise InputError naming the first field out of range."""
        if self.split is not None and self.split not in ("train", "calib", "test"):
            raise InputError(f"expected train, calib, test or None, got {self.split!r}",
                             field="split")
        if self.limit is not None and (isinstance(self.limit, bool)
                                       or not isinstance(self.limit, int) or self.limit < 2):
            raise InputError(f"expected an integer >= 2 (one pair) or None, got "
                             f"{self.limit!r}", field="limit")
        if self.direction not in DIRECTIONS:
            raise InputError(f"expected one of {list(DIRECTIONS)}, got {self.direction!r}",
                             field="direction")
        if self.readout not in CONFIDENCE_READOUTS and not self.readout.startswith("probe:"):
            raise InputError(f"expected a confidence readout {list(CONFIDENCE_READOUTS)} or a "
                             f"probe head probe:<name>, got {self.readout!r}", field="readout")
        for name in ("top_k", "max_segments"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"expected a positive integer, got {value!r}", field=name)

    def out_dir(self) -> Path:
        """The run folder: ``out``, else runs/spans-<benchmark stem>-<split or all>."""
        return self.out or Path("runs") / f"spans-{Path(self.benchmark).stem}-{self.split or 'all'}"

    def command(self) -> str:
        """The `calimon spans` command line that reproduces these settings (non-default
        flags, then --store and --out)."""
        parts = ["calimon spans"]
        defaults = SpanSettings()
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in _NOT_FLAGS or f.name == "store" or v == getattr(defaults, f.name):
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(v, bool):
                parts.append(flag if v else f"--no-{f.name.replace('_', '-')}")
            else:
                parts.append(f"{flag} {'all' if v is None else v}")
        return " ".join(parts + [f"--store {self.store}", f"--out {self.out_dir()}"])
