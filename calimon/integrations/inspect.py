"""calimon in UK AISI's Inspect (the ``inspect`` extra): a scorer and a tool-call approver.

- `monitor_scorer`: scores each sample's trajectory; the `Score`'s ``value`` is the calibrated
  probability of misbehavior (the raw score when the monitor has no map), ``answer`` the
  policy's decision (``pass``, ``review``, ``block``; none without a policy), ``explanation``
  one line with the evidence, strongest first with each segment's precision and the messages
  it falls in (``[M<n>]``, n the message's 0-based position in the transcript), and ``metadata["calimon"]`` the whole `Assessment` (p_raw, p_cal,
  spans mapped to messages, provenance). A sample the monitor could not score gets
  ``Score.unscored`` (NaN, skipped by the metrics), never a 0.
- `monitor_approver`: before a tool call runs, scores the trajectory with the proposed call and
  answers from the policy's decision: ``pass`` approves, ``review`` escalates (to the next
  approver of the approval policy, e.g. Inspect's ``human`` approver), ``block`` rejects (or
  terminates the sample, ``block="terminate"``).

Both take ``policy=`` (a policy file), ``model=`` (scorer only: a monitor without decisions) or
``url=`` (a ``calimon serve`` server). ``model=`` may be an Inspect model, a ``provider/model``
name or a ``Model``, and ``model_role=`` an eval's model role (``eval(model_roles=...)``;
resolved on the first sample): the monitor then runs on Inspect's model API (the ``inspect``
backend), alone or serving the policy's monitor (``policy=`` with ``model=`` or
``model_role=``; `calimon.integrations.inspect_model`). The scorer's metrics read each sample's
target as its label: AUROC, and the miss and false-alarm rates at the policy's thresholds
(`calimon.integrations.inspect_metrics`). The transcript is the one ``calimon score`` reads
from the sample in the eval log (`calimon.integrations.transcripts`). Registered with Inspect
as ``calimon/monitor_scorer`` and ``calimon/monitor_approver`` (approval policy files,
``inspect score --scorer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from calimon.errors import MissingExtraError

try:
    from inspect_ai.approval import Approval, Approver, approver
    from inspect_ai.model import ChatMessage, ChatMessageAssistant, Model
    from inspect_ai.scorer import Reference, Score, Scorer, Target, mean, scorer, stderr
    from inspect_ai.solver import TaskState
    from inspect_ai.tool import ToolCall, ToolCallView
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingExtraError("calimon.integrations.inspect needs inspect_ai: "
                            "pip install 'calimon[inspect]'") from None

from calimon.integrations import Assessment
from calimon.integrations.assessment import cite, ranked_spans
from calimon.integrations.inspect_metrics import auroc, label_lists, policy_rates, target_label
from calimon.integrations.inspect_model import role_model
from calimon.integrations.lazy import LazyMonitor
from calimon.integrations.transcripts import sample_from_messages

APPROVAL = {"pass": "approve", "review": "escalate", "block": "reject"}


@scorer(metrics=[mean(), stderr(), auroc(), policy_rates()], name="monitor_scorer")
def monitor_scorer(policy: str | None = None, model: str | Model | None = None,
                   url: str | None = None, readout: str = "verdict", prompt: str | None = None,
                   calibration_map: str | None = None, store: str | None = None,
                   api_key: str | None = None, force: bool = False,
                   model_role: str | None = None, positive: str | Sequence[str] | None = None,
                   negative: str | Sequence[str] | None = None) -> Scorer:
    """An Inspect scorer: each sample's calibrated probability of misbehavior, the policy's
    decision and the evidence, with metrics on the targets (module docstring). The monitor is
    built on the first sample. ``positive`` / ``negative``: the target values that label
    misbehavior and benign samples (`calimon.integrations.inspect_metrics`)."""
    labels = label_lists(positive, negative)
    monitor = LazyMonitor(dict(policy=policy, model=model, url=url, readout=readout, prompt=prompt,
                         calibration_map=calibration_map, store=store, api_key=api_key,
                         force=force))

    async def score(state: TaskState, target: Target) -> Score:
        bind_role(monitor, model, model_role)
        sample = sample_from_messages(state.messages, input=state.input,
                                      id=f"{state.sample_id}:{state.epoch}")
        [a] = await monitor.assess([sample])
        return assessment_score(a, state.messages, label=target_label(target, *labels))

    return score


def bind_role(monitor: LazyMonitor, model: str | Model | None, role: str | None) -> None:
    """Before the monitor is built: the Inspect model bound to ``role`` in the running eval
    (else ``model``; `calimon.integrations.inspect_model.role_model`) becomes its model."""
    if role is not None and monitor.monitor is None:
        monitor.kwargs["model"] = role_model(model, role)


def assessment_score(a: Assessment, messages: list[ChatMessage], *,
                     label: bool | None = None) -> Score:
    """An `Assessment` as an Inspect `Score` (module docstring); the spans' messages are also
    given as Inspect View references (``metadata["scanner_references"]``), and the sample's
    label (from its target) as ``metadata["label"]``, which the metrics read."""
    meta: dict[str, Any] = {"calimon": a.to_dict(), "label": label}
    refs = references(a)
    if refs:
        meta["scanner_references"] = [r.model_dump() for r in refs]
    explanation = a.reason() + cites(refs)
    if not a.scored:
        return Score.unscored(reason="calimon gave no score", answer=a.decision,
                              explanation=explanation, metadata=meta)
    return Score(value=a.probability, answer=a.decision, explanation=explanation, metadata=meta)


def references(a: Assessment) -> list[Reference]:
    """One Inspect `Reference` per message an evidence span falls in (by message id; cite
    ``[M<n>]``, n the message's 0-based position in the transcript, the index the spans'
    ``messages`` carry), strongest evidence first, without repeats."""
    seen: dict[str, Reference] = {}
    for span in ranked_spans(a.spans):
        for m in span.get("messages", ()):
            if m.get("id") and m["id"] not in seen:
                seen[m["id"]] = Reference(type="message", id=m["id"], cite=cite(m["index"]))
    return list(seen.values())


def cites(refs: list[Reference]) -> str:
    """`` (in [M3], [M5])`` for the references, or nothing."""
    return f" (in {', '.join(r.cite for r in refs if r.cite)})" if refs else ""


@approver(name="monitor_approver")
def monitor_approver(policy: str | None = None, url: str | None = None,
                     calibration_map: str | None = None, prompt: str | None = None,
                     block: Literal["reject", "terminate"] = "reject",
                     store: str | None = None, api_key: str | None = None,
                     force: bool = False, model: str | Model | None = None,
                     model_role: str | None = None) -> Approver:
    """An Inspect approver: the policy's decision on the trajectory with the proposed tool call
    (module docstring). Needs a policy (``policy=`` here, or the server's at ``url=``);
    ``model=`` / ``model_role=``: the Inspect model that serves the policy's monitor."""
    monitor = LazyMonitor(dict(policy=policy, url=url, calibration_map=calibration_map,
                         prompt=prompt, store=store, api_key=api_key, force=force,
                         model=model), need_policy=True)
    answers = {**APPROVAL, "block": block}

    async def approve(message: str, call: ToolCall, view: ToolCallView,
                      history: list[ChatMessage]) -> Approval:
        bind_role(monitor, model, model_role)
        messages = proposed_messages(history, call, message)
        sample = sample_from_messages(messages, id=call.id or None)
        [a] = await monitor.assess([sample])
        return Approval(decision=answers[a.decision], explanation=a.reason(),
                        metadata={"calimon": a.to_dict()})

    return approve


def proposed_messages(history: list[ChatMessage], call: ToolCall, message: str = ""
                      ) -> list[ChatMessage]:
    """The trajectory up to the proposed call: the history whose last assistant message holds
    the call, with that message keeping only this call (others of the same turn are judged by
    their own approval); a history without it gets an assistant message with the call added."""
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if isinstance(m, ChatMessageAssistant) and any(
                c.id == call.id for c in m.tool_calls or ()):
            return [*history[:i], m.model_copy(update={"tool_calls": [call]})]
    return [*history, ChatMessageAssistant(content=message, tool_calls=[call])]


__all__ = ["assessment_score", "bind_role", "monitor_approver", "monitor_scorer", "proposed_messages",
           "references"]
