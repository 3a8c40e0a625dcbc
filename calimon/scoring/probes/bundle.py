"""A shipped monitor: one card, ``heads/<model>/<name>.bundle.yaml``, naming a sequence head (the
score), an optional token head (the evidence spans) and an optional calibration map, all in the
same folder, with the command that made them, the training data and the measured metrics.

The heads are ordinary head artifacts (`calimon.scoring.probes.artifacts`) and the map an ordinary map file
(`calimon.calibration.io`), so each part is also usable alone; the card only binds them and
records the checks that make them one monitor: the same base model and revision, and the same
scoring pass (prompt template hash and input limit), so one forward pass serves both heads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from calimon.calibration.io import StoredMap, load_map
from calimon.config import load_yaml_model
from calimon.curve_result import Counts, RunInfo
from calimon.errors import InputError
from calimon.run_folder import read_curve_json
from calimon.scoring.probes.artifacts import (
    HeadCard,
    HeadMismatchError,
    check_name,
    head_provenance,
    head_search_path,
    heads_dir,
    load_head,
    model_files,
)
from calimon.scoring.probes.head import ProbeHead

SUFFIX = ".bundle.yaml"


class BundleModelRef(BaseModel):
    """The bundle's base model: name and revision (the heads' cards carry the shapes)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    revision: str


class BundleCard(BaseModel):
    """A bundle's card (module docstring); unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    name: str
    base_model: BundleModelRef
    sequence_head: str
    token_head: str | None = None
    calibration_map: str | None = None
    recipe: str
    command: str
    training: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    forced: list[str] = []  # provenance mismatches bound with --force (calimon.provenance)
    calimon_version: str
    created: str


@dataclass(frozen=True, eq=False)
class Bundle:
    """A loaded bundle: its card and path, the sequence head, the token head and the map."""

    card: BundleCard
    path: Path
    sequence: ProbeHead
    sequence_card: HeadCard
    token: ProbeHead | None = None
    token_card: HeadCard | None = None
    calibration: StoredMap | None = None

    @property
    def weights_sha256(self) -> str:
        """The heads' weight hashes together (what a reading of the bundle depends on)."""
        parts = [self.sequence_card.weights_sha256]
        if self.token_card is not None:
            parts.append(self.token_card.weights_sha256)
        return "+".join(parts)


def bundle_path(model: str, name: str, root: str | Path | None = None) -> Path:
    """``<model>/<name>.bundle.yaml`` under ``root`` (default: `heads_dir`, where new heads are
    written)."""
    return Path(root or heads_dir()) / model / f"{check_name(name)}{SUFFIX}"


def find_bundle(path_or_name: str | Path, model_name: str | None,
                root: str | Path | None = None) -> Path | None:
    """The bundle card that ``path_or_name`` names (a card path, or a name under
    ``<folder>/<model_name>/`` of the first folder of `head_search_path` that has it), or None
    when it names no bundle."""
    p = Path(path_or_name)
    if p.name.endswith(SUFFIX):
        if not p.is_file():
            raise InputError(f"no bundle card at {p}", field="head")
        return p
    if model_name is None or "/" in str(path_or_name) or p.suffix in (".yaml", ".safetensors"):
        return None
    for _, folder in head_search_path(root):
        try:
            card = bundle_path(model_name, str(path_or_name), folder)
        except InputError:
            return None
        if card.is_file():
            return card
    return None


def load_bundle(card_path: str | Path, *, model_ref=None, hidden_size: int | None = None,
                check_model: bool = True) -> Bundle:
    """Load a bundle card and everything it names; with ``model_ref`` (and ``check_model``)
    the base model must match. A part that is missing, altered or reads another pass raises
    HeadMismatchError."""
    card_path = Path(card_path)
    card = load_yaml_model(card_path, BundleCard)
    where = f"bundle {card.name!r} ({card_path})"
    folder = card_path.parent

    def head(name: str, kind: str) -> tuple[ProbeHead, HeadCard]:
        h, c = load_head(folder / f"{check_name(name)}.card.yaml", model_ref=model_ref,
                         hidden_size=hidden_size, check_model=check_model)
        if c.kind != kind:
            raise HeadMismatchError(f"{where}: {name!r} is a {c.kind} head, expected {kind}")
        if (c.base_model.name, c.base_model.revision) != (card.base_model.name,
                                                          card.base_model.revision):
            raise HeadMismatchError(f"{where}: head {name!r} was trained on "
                                    f"{c.base_model.name} {c.base_model.revision}, the bundle "
                                    f"names {card.base_model.name} {card.base_model.revision}")
        return h, c

    seq, seq_card = head(card.sequence_head, "sequence")
    tok = tok_card = None
    if card.token_head is not None:
        tok, tok_card = head(card.token_head, "token")
        if (tok_card.prompt.template_hash, tok_card.prompt.max_input_tokens) != \
                (seq_card.prompt.template_hash, seq_card.prompt.max_input_tokens):
            raise HeadMismatchError(f"{where}: the two heads read different passes (template "
                                    f"hash / input limit {seq_card.prompt.template_hash}/"
                                    f"{seq_card.prompt.max_input_tokens} vs "
                                    f"{tok_card.prompt.template_hash}/"
                                    f"{tok_card.prompt.max_input_tokens}); retrain one of them")
    stored = None
    if card.calibration_map is not None:
        name = card.calibration_map
        if Path(name).name != name or name in ("", ".", ".."):
            raise HeadMismatchError(f"{where}: calibration_map must be a plain file name in the "
                                    f"card's folder, got {name!r}")
        stored = load_map(folder / name)
    return Bundle(card, card_path, seq, seq_card, tok, tok_card, stored)


def save_bundle(card: BundleCard, root: str | Path | None = None) -> Path:
    """Write the card next to the parts it names and load it back, so that a card naming a
    missing or mismatched part is never left behind; returns the card path."""
    path = bundle_path(card.base_model.name, card.name, root)
    _check_parts(card, path.parent)
    path.write_text(yaml.safe_dump(json.loads(card.model_dump_json()), sort_keys=False),
                    encoding="utf-8")
    try:
        load_bundle(path)
    except Exception:
        path.unlink(missing_ok=True)
        raise
    return path


def _check_parts(card: BundleCard, folder: Path) -> None:
    names = [f"{card.sequence_head}.card.yaml"]
    if card.token_head is not None:
        names.append(f"{card.token_head}.card.yaml")
    if card.calibration_map is not None:
        names.append(card.calibration_map)
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise InputError(f"bundle {card.name!r}: {', '.join(missing)} not found in {folder}",
                         field="bundle")


def curve_metrics(curve_json: str | Path) -> dict[str, Any]:
    """The figures a bundle card records from a ``calimon curve`` run of its own readout: the
    benchmark, split and dataset hash it was judged on, AUROC raw and calibrated, the map, and
    every operating point's threshold, MR and FAR."""
    r = read_curve_json(curve_json, required=("run", "operating_points", "auroc_raw", "auroc"))
    run, counts = r.run or RunInfo(), r.counts or Counts()
    points = {p.name: {k: v for k, v in p.to_dict().items() if k in ("threshold", "mr", "far")}
              for p in r.operating_points}
    return {"benchmark": r.provenance.benchmark, "split": r.settings.split,
            "dataset_hash": r.provenance.dataset_hash, "readout": run.readout,
            "n": counts.scored, "n_positive": counts.n_pos,
            "auroc_raw": r.auroc_raw, "auroc": r.auroc,
            "calibration": run.calibration, "operating_points": points}


def bound_to(name: str, seq_card: HeadCard, readout: str | None) -> dict[str, Any]:
    """What a map or a curve run bound into bundle ``name`` must have been made for: the
    sequence head's model, revision, prompt and defenses, read as ``probe:<sequence head>``
    or ``probe:<name>`` (``readout``, the artifact's, when it is one of those)."""
    made_for = head_provenance(seq_card)
    accepted = (f"probe:{seq_card.name}", f"probe:{name}")
    return {**{k: made_for[k] for k in ("model", "model_revision", "prompt", "defenses")},
            "readout": readout if readout in accepted else accepted[0]}


BOUND_KEYS = ("model", "model_revision", "prompt", "readout", "defenses")


def _check_bound(what: str, recorded: dict[str, Any], name: str, seq_card: HeadCard, *,
                 force: bool, path: str) -> list[str]:
    from calimon.provenance import meet

    return meet(what, recorded, bound_to(name, seq_card, recorded.get("readout")),
                force=force, path=path, keys=BOUND_KEYS, against="bundle")


def _curve_provenance(curve_json: str | Path) -> dict[str, Any]:
    return read_curve_json(curve_json).provenance.as_dict()


def _copy_map(src: str | Path, dest: Path, name: str) -> None:
    """The map file, its ``extra`` naming the bundle (readout ``probe:<name>``; the sequence
    head's readout and template hash kept as ``sequence_readout`` / ``sequence_template_hash``),
    so that the map is applied to runs of the bundle (`calimon curve --calibration-map`)."""
    doc = json.loads(Path(src).read_text(encoding="utf-8"))
    extra = dict(doc.get("extra") or {})
    for key in ("readout", "template_hash"):
        if key in extra:
            extra[f"sequence_{key}"] = extra.pop(key)
    doc["extra"] = {**extra, "readout": f"probe:{name}"}
    dest.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    load_map(dest)


def make_bundle(name: str, model: str, sequence_head: str, *, recipe: str, command: str,
                token_head: str | None = None, calibration_map: str | Path | None = None,
                curve_json: str | Path | None = None, root: str | Path | None = None,
                force: bool = False) -> Path:
    """Assemble and save a bundle of heads already saved under ``heads/<model>/``: the map (a
    file of ``calimon curve``'s ``calibration/``) is copied next to them as
    ``<name>.calibration.json`` (`_copy_map`), the training data is read from the sequence
    head's card and the metrics from ``curve_json``. The map and the curve run must have been
    made for the sequence head (or the bundle): another model, revision, prompt, readout or
    defense is refused with one line naming both sides unless ``force``, which records it on
    the card (``forced``). Returns the card path."""
    from calimon import __version__
    from calimon.scoring.probes.artifacts import now

    folder = Path(root or heads_dir()) / model
    _, seq_card = load_head(folder / f"{check_name(sequence_head)}.card.yaml")
    forced: list[str] = []
    stored = None
    if calibration_map is not None:
        stored = load_map(calibration_map)  # refuse a file that is not a map before copying it
        forced += _check_bound("calibration map", stored.extra, name, seq_card, force=force,
                               path=str(calibration_map))
    if curve_json:
        forced += _check_bound("curve run", _curve_provenance(curve_json), name, seq_card,
                               force=force, path=str(curve_json))
    metrics = curve_metrics(curve_json) if curve_json else {}
    map_name = None
    if stored is not None:
        map_name = f"{check_name(name)}.calibration.json"
        _copy_map(calibration_map, folder / map_name, name)
    card = BundleCard(
        version=1, name=name,
        base_model=BundleModelRef(name=seq_card.base_model.name,
                                  revision=seq_card.base_model.revision),
        sequence_head=sequence_head, token_head=token_head, calibration_map=map_name,
        recipe=recipe, command=command,
        training=json.loads(seq_card.training.model_dump_json()),
        metrics=metrics, forced=forced,
        calimon_version=__version__, created=now())
    return save_bundle(card, root)


def list_bundles(model: str | None = None, root: str | Path | None = None) -> list[dict]:
    """One row per bundle card (over every folder of `head_search_path`, as `list_heads`):
    model, name, the heads it binds, its map and AUROC."""
    rows = []
    for path in model_files(model, f"*{SUFFIX}", root):
        try:
            card = load_yaml_model(path, BundleCard)
        except InputError as exc:
            rows.append({"model": path.parent.name, "name": path.name, "error": str(exc)})
            continue
        rows.append({"model": card.base_model.name, "name": card.name,
                     "sequence_head": card.sequence_head, "token_head": card.token_head,
                     "calibration_map": card.calibration_map,
                     "auroc": card.metrics.get("auroc"), "path": str(path)})
    return rows
