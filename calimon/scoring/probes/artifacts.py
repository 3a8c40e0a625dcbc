"""Head artifacts: ``heads/<model>/<name>.safetensors`` (float64 tensors) + ``<name>.card.yaml``.

The card says what the head reads and how it was made: base model and revision, hidden size,
layer, pooling/aggregation, the prompt (template hash) and input limit of the pass it reads,
training data hash and split, metrics, cost, calimon version, and the sha256 of the weights.
Loading checks the base model, the shapes and the weights hash, and refuses a mismatch.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from calimon.config import load_yaml_model
from calimon.errors import CalimonError, InputError
from calimon.resources import HEADS_ENV, heads_roots, heads_write_dir, searched
from calimon.scoring.probes.head import ProbeHead

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class HeadMismatchError(CalimonError):
    """A head does not fit the model, prompt or weights it is used with."""

    exit_code = 2


class BaseModelRef(BaseModel):
    """The card's base model: name, revision and the shapes the head was trained on."""

    model_config = ConfigDict(extra="forbid")
    name: str
    revision: str
    hidden_size: int
    num_layers: int


class PromptRef(BaseModel):
    """The card's prompt: name, template hash of the pass the head reads, readout, input
    limit and prompt defenses (none: heads are trained on the undefended pass)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    template_hash: str
    readout: str = "verdict"
    max_input_tokens: int
    defenses: list[str] = []


class AugmentationRef(BaseModel):
    """The card's training-time augmentation (`calimon.studies.heads.augment`): kinds, copies per
    sample, seed, copies added, the phrase set's hash and what is held out for evaluation."""

    model_config = ConfigDict(extra="forbid")
    kinds: list[str]
    copies: int
    seed: int
    n_added: int
    n_added_positive: int
    phrases_sha256: str
    held_out: str


class ReviewsRef(BaseModel):
    """Reviewed labels a head was trained on with its original data
    (`calimon.studies.heads.reviews`): the export file and its sha256, where it came from, the
    weighting, the split and every label (id, reviewers, time, label, split)."""

    model_config = ConfigDict(extra="forbid")
    file: str
    sha256: str
    source: str | None = None  # the server's URL when the labels were fetched
    weight: float
    eval_share: float
    split_rule: str
    n_train: int
    n_eval: int
    n_eval_dropped: int = 0
    n_train_dropped: int = 0
    labels: list[dict[str, Any]] = []


class RecipeCandidate(BaseModel):
    """One recipe the sweep tried: its CV AUROC (pair-grouped out-of-fold) and the standard
    error of its per-fold AUROCs."""

    model_config = ConfigDict(extra="forbid")
    recipe: str  # e.g. "logistic 11 max", "logistic 11+17 max", "mlp 11 max", "attention 15"
    cv_auroc: float | None
    cv_se: float | None


class RecipeRef(BaseModel):
    """How the head's recipe was chosen (`calimon.studies.heads.recipe`): every candidate's
    CV figure, the rule, the choice and why; ``pinned``: what a flag fixed."""

    model_config = ConfigDict(extra="forbid")
    rule: str
    chosen: str
    reason: str
    pinned: dict[str, Any] = {}
    C: float | None = None  # the C every candidate was compared at
    n_splits: int
    seconds: float | None = None
    candidates: list[RecipeCandidate]


class TrainingRef(BaseModel):
    """The card's training data (benchmark, dataset hash, split, counts, categories), parameters
    and cost."""

    model_config = ConfigDict(extra="forbid")
    benchmark: str
    dataset_hash: str
    split: str
    n_samples: int
    n_positive: int
    categories: list[str]
    seed: int
    params: dict[str, Any] = {}
    seconds: float | None = None
    peak_memory_mb: float | None = None  # tracemalloc peak: torch allocations not counted
    augmentation: AugmentationRef | None = None
    reviews: ReviewsRef | None = None
    recipe: RecipeRef | None = None


class HeadCard(BaseModel):
    """A head's card (``<name>.card.yaml``, module docstring); unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    name: str
    kind: Literal["sequence", "token"]
    estimator: Literal["logistic", "mlp", "attention"]
    layer: int
    layers: list[int] | None = None  # several layers' pooled states, concatenated
    pooling: str | None = None
    aggregate: str = "max"
    span_threshold: float = 0.5
    base_model: BaseModelRef
    prompt: PromptRef
    training: TrainingRef
    metrics: dict[str, float | None] = {}
    weights_file: str
    weights_sha256: str
    calimon_version: str
    created: str


def heads_dir() -> Path:
    """Where new heads are written when no folder is given: $CALIMON_HEADS_DIR, else ``heads/``
    of the source checkout, else the user folder's ``heads/`` (`calimon.resources`)."""
    return heads_write_dir()


def head_search_path(root: str | Path | None = None) -> list[tuple[str, Path]]:
    """The heads folders a name is looked up in, in order: ``root`` alone when given, else
    `calimon.resources.heads_roots` ($CALIMON_HEADS_DIR, the user folder, the package)."""
    return [("given folder", Path(root))] if root else heads_roots()


def not_found(model: str, root: str | Path | None) -> str:
    """The end of a 'no such head' message: the ``<model>/`` folders searched."""
    return searched([(w, f / model) for w, f in head_search_path(root)],
                    None if root else HEADS_ENV)


def check_name(name: str) -> str:
    """``name`` if it is a valid head name (letters, digits, ``_ . -``, not starting with a dot),
    else InputError."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(f"expected a head name of letters, digits, '_', '.', '-' (not starting "
                         f"with a dot), got {name!r}", field="name")
    return name


def head_paths(model: str, name: str, root: str | Path | None = None) -> tuple[Path, Path]:
    """``(weights path, card path)`` of head ``name`` of ``model`` under ``root`` (default:
    `heads_dir`); raises InputError for an invalid name."""
    folder = Path(root or heads_dir()) / model
    return folder / f"{check_name(name)}.safetensors", folder / f"{name}.card.yaml"


def save_head(head: ProbeHead, card: HeadCard, root: str | Path | None = None) -> Path:
    """Write weights and card; returns the card path. The card's weights fields are filled in."""
    from safetensors.numpy import save_file

    weights, card_path = head_paths(card.base_model.name, card.name, root)
    weights.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: head.params[k].astype("float64") for k in sorted(head.params)}, str(weights),
              metadata={"kind": head.kind, "estimator": head.estimator})
    final = card.model_copy(update={"weights_file": weights.name,
                                    "weights_sha256": head.weights_hash(),
                                    "kind": head.kind, "estimator": head.estimator,
                                    "layer": head.layer, "pooling": head.pooling,
                                    "layers": list(head.layers) or None,
                                    "aggregate": head.aggregate,
                                    "span_threshold": float(head.span_threshold)})
    card_path.write_text(yaml.safe_dump(json.loads(final.model_dump_json()), sort_keys=False))
    return card_path


def head_provenance(card: HeadCard) -> dict[str, Any]:
    """What a head was made for, in the terms `calimon.provenance.meet` compares: its base
    model and revision, and the pass it reads (prompt, template hash, readout, defenses)."""
    return {"model": card.base_model.name, "model_revision": card.base_model.revision,
            "prompt": card.prompt.name, "template_hash": card.prompt.template_hash,
            "readout": card.prompt.readout, "defenses": list(card.prompt.defenses)}


def load_head(path_or_name: str | Path, *, model_ref=None, hidden_size: int | None = None,
              root: str | Path | None = None, check_model: bool = True
              ) -> tuple[ProbeHead, HeadCard]:
    """Load a head by card path or by name (under ``heads/<model_ref.name>/``). With
    ``model_ref`` (and ``check_model``) the base model name and revision must match; with
    ``hidden_size`` the shapes. A caller that compares the model itself, with ``--force``
    (`calimon.scoring.probes.monitor.ProbeMonitor`), passes ``check_model=False``."""
    from safetensors.numpy import load_file

    card_path = find_head_card(path_or_name, model_ref, root)
    card = load_yaml_model(card_path, HeadCard)
    where = f"head {card.name!r} ({card_path})"
    if check_model and model_ref is not None and \
            (card.base_model.name, card.base_model.revision) != \
            (model_ref.name, model_ref.revision):
        raise HeadMismatchError(
            f"{where} was trained on {card.base_model.name} revision "
            f"{card.base_model.revision}, not on {model_ref.name} revision {model_ref.revision}; "
            "a probe only reads the hidden states of its own base model: retrain it "
            "(calimon heads train) for this model")
    if hidden_size is not None and hidden_size != card.base_model.hidden_size:
        raise HeadMismatchError(f"{where} expects hidden size {card.base_model.hidden_size}, "
                                f"the model has {hidden_size}")
    if Path(card.weights_file).name != card.weights_file or card.weights_file in ("", ".", ".."):
        raise HeadMismatchError(f"{where}: weights_file must be a plain file name in the card's "
                                f"folder, got {card.weights_file!r}")
    weights = card_path.parent / card.weights_file
    if not weights.is_file():
        raise HeadMismatchError(f"{where}: weights file {weights} is missing")
    try:
        params = load_file(str(weights))
    except Exception as exc:  # safetensors raises its own error types (and OSError) on bad bytes
        raise HeadMismatchError(f"{where}: weights file {weights} is not a readable safetensors "
                                f"file ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
                                ) from None
    try:
        head = ProbeHead(card.kind, card.estimator, card.layer, params, pooling=card.pooling,
                         aggregate=card.aggregate, span_threshold=card.span_threshold,
                         layers=tuple(card.layers or ()))
    except InputError as exc:
        raise HeadMismatchError(f"{where}: {exc}") from None
    if head.hidden_size != card.base_model.hidden_size:
        raise HeadMismatchError(f"{where}: weights have hidden size {head.hidden_size}, the "
                                f"card says {card.base_model.hidden_size}")
    if head.weights_hash() != card.weights_sha256:
        raise HeadMismatchError(f"{where}: weights do not match the card's sha256 (the file "
                                "was changed after training)")
    return head, card


def find_head_card(path_or_name: str | Path, model_ref, root) -> Path:
    """The card a head name (under ``heads/<model_ref.name>/``) or path names; InputError
    naming the known heads when there is none."""
    p = Path(path_or_name)
    if p.suffix in (".yaml", ".safetensors") or p.is_file():
        card = p if p.name.endswith(".card.yaml") else p.with_name(
            p.name.removesuffix(".safetensors") + ".card.yaml")
        if not card.is_file():
            raise InputError(f"no head card at {card}", field="head")
        return card
    if model_ref is None:
        raise InputError(f"head {path_or_name!r}: pass a card path, or a model to look the "
                         "name up under heads/<model>/", field="head")
    for _, folder in head_search_path(root):
        _, card = head_paths(model_ref.name, str(path_or_name), folder)
        if card.is_file():
            return card
    known = [c["name"] for c in list_heads(model_ref.name, root)]
    raise InputError(f"no head {path_or_name!r} for model {model_ref.name}; known: {known}; "
                     f"{not_found(model_ref.name, root)}", field="head")


def list_heads(model: str | None = None, root: str | Path | None = None) -> list[dict]:
    """One row per head card: model, name, kind, layer, pooling, metrics, path; over every
    folder of `head_search_path`, a card hidden by one of the same name found earlier left
    out."""
    rows = []
    for card_path in model_files(model, "*.card.yaml", root):
        try:
            card = load_yaml_model(card_path, HeadCard)
        except InputError as exc:
            rows.append({"model": card_path.parent.name, "name": card_path.name,
                         "error": str(exc)})
            continue
        rows.append({"model": card.base_model.name, "name": card.name, "kind": card.kind,
                     "estimator": card.estimator, "layer": card.layer, "layers": card.layers,
                     "pooling": card.pooling, "aggregate": card.aggregate,
                     "prompt": card.prompt.name, "benchmark": card.training.benchmark,
                     "metrics": card.metrics, "path": str(card_path)})
    return rows


def model_files(model: str | None, pattern: str, root: str | Path | None = None) -> list[Path]:
    """The files matching ``pattern`` in ``<folder>/<model>/`` (every model's folder when
    ``model`` is None) of each folder of `head_search_path`; of two with one model folder and
    file name, the first found."""
    seen: dict[tuple[str, str], Path] = {}
    for _, base in head_search_path(root):
        folders = [base / model] if model else sorted(p for p in base.glob("*") if p.is_dir())
        for path in (p for f in folders for p in sorted(f.glob(pattern))):
            seen.setdefault((path.parent.name, path.name), path)
    return [seen[k] for k in sorted(seen)]


def now() -> str:
    """The current UTC time, ISO 8601 to the second (a card's ``created``)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
