"""`calimon heads train`: features of a benchmark's train split -> a head artifact.

Only the ``train`` split is used for fitting (and for the layer sweep); with ``evaluate`` the
``calib`` and ``test`` splits are extracted too and the card records the test figures of
:func:`calimon.studies.heads.evaluate.evaluate_readout`.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calimon import __version__
from calimon.data.registry import load_benchmark
from calimon.errors import InputError
from calimon.progress import Progress
from calimon.samples import Sample
from calimon.scoring.backends import HiddenStates, check_backend_model, model_for, requires
from calimon.scoring.backends.offline import check_reachable
from calimon.scoring.engines import RunSettings
from calimon.scoring.probes.artifacts import (
    AugmentationRef,
    BaseModelRef,
    HeadCard,
    PromptRef,
    TrainingRef,
    check_name,
    now,
    save_head,
)
from calimon.scoring.probes.capture import POOLINGS
from calimon.scoring.probes.features import FeatureSet, extract_features
from calimon.scoring.probes.head import ESTIMATORS
from calimon.selection import dataset_hash, select
from calimon.studies.heads.evaluate import evaluate_readout
from calimon.studies.heads.train import (
    ATTENTION_EPOCHS,
    ATTENTION_WDS,
    DEFAULT_CS,
    RecipeChoice,
    fit_attention_head,
    fit_sequence,
    fit_token_head,
    head_scores,
)


@dataclass(frozen=True, kw_only=True)
class HeadTrainSettings(RunSettings):
    """A head to train (name, kind, layer, pooling, estimator) on a benchmark's train split,
    read from the verdict pass of ``prompt``; the model, benchmark, train budget (``limit``),
    seed and backend flags come from `RunSettings` (the backend needs hidden states; features
    are extracted in this process, so the engine is local)."""

    name: str
    kind: str = "sequence"
    layer: int | None = None  # None: chosen by CV (calimon.studies.heads.recipe)
    pooling: str | None = None  # None: chosen by CV
    estimator: str | None = None  # None: chosen by CV (logistic, mlp; attention at attention_layers)
    attention_layers: tuple[int, ...] = ()  # recipe search: attention candidates at these layers
    concat: bool = True  # recipe search: two-layer candidates too
    max_input_tokens: int = 1024
    eval_limit: int | None = None  # at most this many calib and test samples each
    categories: tuple[str, ...] | None = None
    token_layers: tuple[int, ...] | None = None  # token and attention heads: candidate layers
    evaluate: bool = True
    augment: tuple[str, ...] = ()  # augmentation kinds (calimon.studies.heads.augment); () = none
    augment_copies: int = 1
    out: Path | None = None  # heads root (default: heads/)
    from_review: Path | None = None  # a review export to train on too (studies.heads.reviews)
    review_source: str | None = None  # the server it was fetched from, recorded
    review_weight: float = 1.0
    review_eval_share: float = 0.3


@dataclass(frozen=True)
class TrainedHead:
    """A saved head: its card's path, the card and the recipe search (when one chose it)."""

    card_path: Path
    card: HeadCard
    recipe: RecipeChoice | None = field(default=None, repr=False)


def default_token_layers(num_layers: int) -> tuple[int, ...]:
    """The candidate layers of a token head: a third, half and two thirds of the way up."""
    return tuple(sorted({round(num_layers * f) for f in (1 / 3, 1 / 2, 2 / 3)}))


def _check(s: HeadTrainSettings) -> None:
    check_name(s.name)
    if s.kind not in ("sequence", "token"):
        raise InputError(f"expected 'sequence' or 'token', got {s.kind!r}", field="kind")
    if s.pooling is not None and s.pooling not in POOLINGS and s.estimator != "attention":
        raise InputError(f"expected one of {list(POOLINGS)}, got {s.pooling!r}", field="pooling")
    if (s.estimator is not None and s.estimator not in ESTIMATORS) or \
            (s.kind == "token" and s.estimator not in (None, "logistic")):
        raise InputError(f"expected one of {list(ESTIMATORS)} (token heads: logistic), got "
                         f"{s.estimator!r}", field="estimator")
    if s.augment:
        from calimon.studies.heads.augment import check_kinds

        check_kinds(s.augment)
        if isinstance(s.augment_copies, bool) or s.augment_copies < 1:
            raise InputError(f"expected an integer >= 1, got {s.augment_copies!r}",
                             field="augment_copies")
    if s.from_review is not None and (s.kind != "sequence" or s.augment
                                      or s.estimator == "attention"):
        raise InputError("training on reviewed labels weights a pooled sequence head; got "
                         f"kind {s.kind!r}, estimator {s.estimator!r}, augment "
                         f"{list(s.augment)}", field="from_review")
    if s.engine != "local":
        raise InputError(f"head training reads hidden states in this process; engine "
                         f"{s.engine!r} cannot run it (use --engine local)", field="engine")


def split_samples(samples: list[Sample], split: str, s: HeadTrainSettings) -> list[Sample]:
    """The labelled samples of ``split`` (of the chosen categories), ``limit`` (train) or
    ``eval_limit`` (calib, test) of them as whole pairs."""
    return select(samples, split, limit=s.limit if split == "train" else s.eval_limit,
                  seed=s.seed, categories=s.categories)


def train_head(s: HeadTrainSettings, progress: Progress | None = None,
               log: Callable[[str], None] = lambda m: None, *, backend=None) -> TrainedHead:
    """Extract features of the train split, fit the head (layer sweep unless ``layer`` is
    given), evaluate it on calib/test when asked, and save it with its card.

    ``backend``: an already-built backend of the settings' model to read hidden states from;
    default: the process's shared one for the settings (`build_backend`)."""
    from calimon.prompts import load_prompt

    _check(s)
    spec = s.monitor_spec(s.model, s.prompt, "verdict")
    if backend is None:
        backend = spec.build_backend(reach=False)  # what it cannot do first, then its server
    else:
        check_backend_model(backend, model_for(spec))
    backend = requires(backend, HiddenStates, needed_for="head training")
    check_reachable(backend)
    prompt = load_prompt(s.prompt)
    samples = load_benchmark(s.benchmark)
    train = split_samples(samples, "train", s)
    if not train:
        raise InputError(f"benchmark {s.benchmark!r} has no labelled samples in split 'train'"
                         + (f" for categories {list(s.categories)}" if s.categories else ""),
                         field="benchmark")
    token_layers: tuple[int, ...] = ()
    if s.kind == "token" or s.estimator == "attention":
        token_layers = (s.token_layers or ((s.layer,) if s.layer is not None
                                           else default_token_layers(backend.num_layers)))
    elif s.estimator is None and s.attention_layers:
        token_layers = tuple(sorted(set(s.attention_layers)))

    def features(rows: list[Sample], label: str) -> FeatureSet:
        tick = progress(f"features {label}", len(rows)) if progress else None
        return extract_features(backend, prompt, rows, max_input_tokens=s.max_input_tokens,
                                token_layers=token_layers, progress=tick)

    added = _augmented(train, s)
    reviews = _review_set(s, train)
    extra = reviews.train_samples() if reviews else []
    fs = features(train + added + extra, "train")
    log(f"train split: {len(train)} samples, {sum(bool(x.label) for x in train)} misbehaving"
        + (f"; {len(added)} augmented copies" if added else "")
        + (f"; {len(extra)} reviewed labels, weight {s.review_weight:g}" if reviews else ""))
    weights = None
    if reviews:
        from calimon.studies.heads.reviews import review_weights

        weights = review_weights(fs.y[:len(train)], fs.y[len(train):], s.review_weight)
    start = time.perf_counter()
    tracemalloc.start()
    head, choice, metrics, params = _fit(fs, s, token_layers, weights)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    seconds = time.perf_counter() - start
    if s.evaluate:
        calib, test = split_samples(samples, "calib", s), split_samples(samples, "test", s)
        if calib and test:
            fc, ft = features(calib, "calib"), features(test, "test")
            r = evaluate_readout(s.name, head_scores(head, fc), fc.y, head_scores(head, ft),
                                 ft.y)
            metrics.update({"test_auroc": r.auroc_raw, "test_ece_cal": r.ece_cal,
                            "test_mr_at_far_5pct": r.mr_at_far, "test_n": r.n_test})
    if reviews and reviews.held_out:
        metrics.update(_review_metrics(head, features(reviews.held_out_samples(), "reviews")))
    card = _card(s, head, backend, prompt, train, fs, params, metrics, seconds, peak,
                 _augmentation_ref(s, added) if s.augment else None,
                 reviews.ref(weight=s.review_weight, eval_share=s.review_eval_share,
                             source=s.review_source) if reviews else None,
                 choice.ref() if choice is not None else None)
    path = save_head(head, card, s.out)
    from calimon.scoring.probes.artifacts import load_head

    _, saved = load_head(path)
    return TrainedHead(path, saved, choice)


def _review_set(s: HeadTrainSettings, train: list[Sample]):
    """The reviewed labels of ``s.from_review`` split for training (None without)."""
    if s.from_review is None:
        return None
    from calimon.studies.heads.reviews import review_set

    return review_set(s.from_review, s.review_eval_share, train)


def _review_metrics(head, fs: FeatureSet) -> dict:
    """AUROC and MR at FAR <= 5% of the raw head score on the held-out reviewed labels, by
    `compute_curve` (undefined below its class-size rule)."""
    from calimon.studies.heads.evaluate import curve_figures

    a, mr = curve_figures(head_scores(head, fs), fs.y, 0.05)
    return {"review_eval_auroc": a, "review_eval_mr_at_far_5pct": mr,
            "review_eval_n": len(fs.samples)}


def _augmented(train: list[Sample], s: HeadTrainSettings) -> list[Sample]:
    """The augmented copies of ``train`` the settings ask for (none without ``augment``)."""
    if not s.augment:
        return []
    from calimon.studies.heads.augment import augment_samples

    return augment_samples(train, s.augment, s.augment_copies, s.seed)


def _augmentation_ref(s: HeadTrainSettings, added: list[Sample]) -> AugmentationRef:
    from calimon.studies.heads.augment import check_kinds, phrases_sha256

    return AugmentationRef(
        kinds=list(check_kinds(s.augment)), copies=s.augment_copies, seed=s.seed,
        n_added=len(added), n_added_positive=sum(bool(x.label) for x in added),
        phrases_sha256=phrases_sha256(),
        held_out="calimon.studies.heads.augment.TRAIN_PHRASES shares no text with the fixed attacks "
                 "(calimon.studies.robustness.attacks) or the adaptive library "
                 "(calimon.studies.robustness.edits.PHRASES); positions are shared")


def _card(s: HeadTrainSettings, head, backend, prompt, train: list[Sample], fs: FeatureSet,
          params: dict, metrics: dict, seconds: float, peak_bytes: int,
          augmentation: AugmentationRef | None = None, reviews=None, recipe=None) -> HeadCard:
    """The card of a head fitted on ``train`` (``fs``: its features, augmented copies
    included) in ``seconds`` with ``peak_bytes`` of traced memory; its weights fields are
    filled when it is saved. Non-finite metrics become None."""
    resolved = backend.model_ref
    return HeadCard(
        version=1, name=s.name, kind=head.kind, estimator=head.estimator, layer=head.layer,
        pooling=head.pooling, aggregate=head.aggregate, span_threshold=head.span_threshold,
        base_model=BaseModelRef(name=resolved.name, revision=resolved.revision,
                                hidden_size=backend.hidden_size, num_layers=backend.num_layers),
        prompt=PromptRef(name=prompt.name, template_hash=prompt.template_hash("verdict"),
                         max_input_tokens=s.max_input_tokens),
        training=TrainingRef(benchmark=s.benchmark, dataset_hash=dataset_hash(train),
                             split="train", n_samples=len(train),
                             n_positive=sum(bool(x.label) for x in train),
                             categories=sorted({x.category for x in train}), seed=s.seed,
                             params=params, seconds=round(seconds, 3),
                             peak_memory_mb=round(peak_bytes / 2**20, 1),
                             augmentation=augmentation, reviews=reviews, recipe=recipe),
        metrics={k: (None if v is None or not np.isfinite(v) else float(v))
                 for k, v in metrics.items()},
        weights_file="", weights_sha256="", calimon_version=__version__, created=now())


def _fit(fs: FeatureSet, s: HeadTrainSettings, token_layers: tuple[int, ...],
         weights: np.ndarray | None = None):
    """(head, recipe search or None, cross-validated metrics, fit parameters) on the train
    features: a sequence head of the recipe the search chooses among what ``s`` leaves free
    (`fit_sequence`), or a token or attention head at the candidate layer with the best CV
    AUROC. ``weights``: the sequence head's sample weights (reviewed labels)."""
    if s.estimator == "attention":
        return _fit_attention(fs, s, token_layers)
    if s.kind == "sequence":
        fit, choice = fit_sequence(fs, s.layer, s.pooling, estimator=s.estimator, seed=s.seed,
                                   sample_weight=weights, concat=s.concat)
        if fit.head.estimator == "attention":
            params = {"weight_decay": fit.weight_decay, "weight_decays": list(ATTENTION_WDS),
                      "epochs": ATTENTION_EPOCHS, "cv_folds": 5}
            return fit.head, choice, {"cv_auroc": fit.cv_auroc[fit.weight_decay]}, params
        params = {"C": fit.C, "Cs": list(DEFAULT_CS), "cv_folds": 5}
        return fit.head, choice, {"cv_auroc": fit.cv_auroc[fit.C]}, params
    fits = {layer: fit_token_head(fs, layer, seed=s.seed) for layer in token_layers}
    layer = max(fits, key=lambda k: (np.nan_to_num(max(fits[k].cv_auroc.values()),
                                                   nan=-1.0), -k))
    tf = fits[layer]
    head = tf.head
    metrics = {"cv_auroc": tf.cv_auroc[head.aggregate],
               "cv_span_f1": tf.cv_span_f1[head.span_threshold]}
    params = {"C": 0.1, "cv_folds": 3, "n_tokens": tf.n_tokens,
              "n_positive_tokens": tf.n_positive_tokens, "candidate_layers": list(token_layers)}
    return head, None, metrics, params


def _fit_attention(fs: FeatureSet, s: HeadTrainSettings, token_layers: tuple[int, ...]):
    """(head, None, metrics, parameters) of an attention head at the candidate layer with the
    best CV AUROC (its L2 weight by CV too)."""
    fits = {layer: fit_attention_head(fs, layer, seed=s.seed) for layer in token_layers}
    layer = max(fits, key=lambda k: (np.nan_to_num(fits[k].cv_auroc[fits[k].weight_decay],
                                                   nan=-1.0), -k))
    fit = fits[layer]
    params = {"weight_decay": fit.weight_decay, "weight_decays": list(ATTENTION_WDS),
              "epochs": ATTENTION_EPOCHS, "cv_folds": 3, "candidate_layers": list(token_layers)}
    return fit.head, None, {"cv_auroc": fit.cv_auroc[fit.weight_decay]}, params
