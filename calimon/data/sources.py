"""Checksummed access to public source files (never committed to the project)."""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from calimon.errors import DataSourceError, InputError
from calimon.jsonio import json_error_where


@dataclass(frozen=True)
class SourceFile:
    """One source file of a benchmark: path (relative to the sources folder), expected sha256,
    upstream address and license."""

    path: str  # relative to the sources directory, e.g. "xstest/xstest_prompts.csv"
    sha256: str
    upstream: str
    license: str


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_source_table(path: Path) -> dict[str, SourceFile]:
    """Read a sources.json: {"files": [{"path", "sha256", "upstream", "license"}, ...]}."""
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))["files"]
        return {r["path"]: SourceFile(r["path"], r["sha256"], r["upstream"], r["license"])
                for r in rows}
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise DataSourceError(f"{path}: not a valid source table ({exc})") from exc


def verified_path(root: Path, entry: SourceFile) -> Path:
    """Return root/entry.path after checking it exists and matches its sha256."""
    path = Path(root) / entry.path
    if not path.is_file():
        raise DataSourceError(
            f"source file missing: {path} (expected {entry.path} from {entry.upstream}, "
            f"license {entry.license})")
    digest = sha256_file(path)
    if digest != entry.sha256:
        raise DataSourceError(
            f"source file altered: {path} has sha256 {digest[:16]}..., expected "
            f"{entry.sha256[:16]}... ({entry.path} from {entry.upstream}); refusing to build")
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSONL file (``.gz``: gzip-compressed); blank lines are skipped and a line
    that is not JSON raises InputError with the file and line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON ({json_error_where(exc)})", path=str(path),
                                 line=lineno) from None
    return rows
