"""The typed requests and responses of `calimon serve` (FastAPI renders them as the OpenAPI page,
``/docs``). A request model forbids unknown top-level fields; chat messages accept OpenAI's and
Inspect's shapes and ignore the fields of theirs that a monitor does not read."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

MAX_STEP = 2**31 - 1  # the decision log's step column is a 32-bit INTEGER in PostgreSQL
Decision = Literal["pass", "review", "block"]
ExternalScore = Field(None, strict=True, description="The monitor's score, in its own units, "
                      "for a policy whose monitor is external (a score:NAME readout; "
                      "docs/serve.md, 'Externally scored policies'): a JSON number, required "
                      "there and refused (422) for a policy whose monitor the server runs. A "
                      "session step's is the score of the trajectory so far.")
RequestId = Field(None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@/+=-]+$",
                  description="The client's id of this request: a retry with the same id is "
                              "answered from the decision log, never scored twice.")


class ContentPart(BaseModel):
    """One part of a message's content; only ``text`` parts are read (images, reasoning and
    other media are left out, as in `calimon.data.inspect_log`)."""

    model_config = ConfigDict(extra="ignore")
    type: str = "text"
    text: str | None = None


class FunctionCall(BaseModel):
    """OpenAI's ``function`` of a tool call: its name and its arguments as a JSON string."""

    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1, max_length=200)
    arguments: str | dict[str, Any] = ""


class ToolCall(BaseModel):
    """A tool call: OpenAI's ``{"id", "type": "function", "function": {"name", "arguments"}}``
    or Inspect's ``{"id", "function": NAME, "arguments": {...}, "parse_error"}``."""

    model_config = ConfigDict(extra="ignore")
    id: str | None = None
    function: str | FunctionCall
    arguments: dict[str, Any] | None = None
    parse_error: str | None = None


class ToolError(BaseModel):
    """Inspect's error of a tool result."""

    model_config = ConfigDict(extra="ignore")
    type: str = "error"
    message: str = ""


class Message(BaseModel):
    """A chat message in OpenAI's or Inspect's shape. A tool result names its tool by
    ``function`` (Inspect), ``name``, or the ``tool_call_id`` of an earlier call (OpenAI)."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    function: str | None = None
    error: ToolError | None = None


class ScoreRequest(BaseModel):
    """One transcript: ``request`` and ``response`` text, or chat ``messages`` (the task is
    the text of the messages before the first assistant message, the response everything from
    it on, rendered as `calimon.data.trajectory` does). ``score``: an external monitor's score
    (externally scored policies only)."""

    model_config = ConfigDict(extra="forbid")
    request_id: str | None = RequestId
    id: str | None = Field(None, min_length=1, max_length=200,
                           description="The transcript's id; it draws the audit slice "
                                       "(default: the transcript's hash).")
    request: str | None = None
    response: str | None = None
    messages: list[Message] | None = None
    score: float | None = ExternalScore


class StepRequest(BaseModel):
    """The next step of a session: the messages added since the last step (an assistant turn,
    a tool call to check before it runs, its result...). ``request``: the task, on the first
    step only (default: the text of the messages before the first assistant message).
    ``step``: the index this step must get (0 for the first), a JSON integer (not ``"0"``,
    ``0.0`` or ``true``); a mismatch is refused (409), so a step is never appended to a session
    the server lost or already moved past."""

    model_config = ConfigDict(extra="forbid")
    request_id: str | None = RequestId
    step: StrictInt | None = Field(None, ge=0, le=MAX_STEP)
    request: str | None = None
    messages: list[Message] = Field(min_length=1)
    score: float | None = ExternalScore


class EvidenceSpan(BaseModel):
    """A piece of evidence; ``start``/``end``: its characters in the response, ``score``: the
    token head's score, when the monitor has them. ``unit`` ``segment``: a segment a reader
    reads (line, sentence, clause, tool-call argument, tool-result line) with its ``rank``
    (0 = strongest; the segments come first, strongest first) and ``precision`` (the
    calibrated probability that it overlaps the evidence of a misbehaving transcript, null
    without a precision map); ``tokens``: one of the token head's runs (token-level marks, in
    text order, after the segments); ``quote``: a quote the monitor wrote."""

    text: str
    start: int | None = None
    end: int | None = None
    score: float | None = None
    precision: float | None = None
    rank: int | None = None
    unit: Literal["segment", "tokens", "quote"] | None = None


class TruncationInfo(BaseModel):
    """How a transcript over the model's input limit was cut (head_tail) before scoring."""

    policy: str
    original_tokens: int
    kept_tokens: int
    dropped_request: int
    dropped_response: int


class ScoreResponse(BaseModel):
    """A decision: the raw and calibrated scores (null when the monitor gave none, never 0),
    the policy's decision, whether the transcript falls in the audit slice, the evidence, and
    what produced it."""

    request_id: str
    status: Literal["ok", "truncated", "parse_failure"]
    p_raw: float | None
    p_cal: float | None
    score: Literal["p_cal", "p_raw"] = Field(description="The score the thresholds read.")
    decision: Decision
    action: Literal["auto_pass", "human_review", "auto_block"]
    audit: bool = Field(description="An automatic decision drawn into the audit slice: a human "
                                    "reviews it too.")
    evidence: list[EvidenceSpan] = []
    truncation: TruncationInfo | None = None
    tokens: int
    model: str
    model_revision: str
    readout: str
    policy: str
    policy_hash: str
    latency_ms: float


class KvUse(BaseModel):
    """What a step cost: tokens whose keys and values came from the session's cache, and tokens
    run through the model. ``mode``: ``cached`` (a prompted readout's session cache),
    ``incremental`` (a probe's session state: the new tokens up to the probe's layer),
    ``windowed`` (over the input limit under the window policy: the windows not read before),
    ``full`` (nothing of the trajectory reused: a monitor without a cache path, a prompt cut
    head_tail, or a probe session's first step or rebuild)."""

    mode: Literal["cached", "incremental", "windowed", "full"]
    reused_tokens: int
    computed_tokens: int
    layers: int | None = Field(None, description="Decoder layers the step's tokens went "
                               "through (probe monitors: the probe's deepest layer).")
    windows: dict[str, Any] | None = Field(None, description="The window policy and the "
                                           "windows read (mode windowed).")


class StepResponse(ScoreResponse):
    """The decision on a session's trajectory up to this step."""

    session_id: str
    step: int
    kv: KvUse


class ErrorDetail(BaseModel):
    """One problem with a request: the field (dotted path into the body) and what is wrong."""

    field: str | None
    message: str
    type: str


class ErrorBody(BaseModel):
    """An error answer: the HTTP status, a short code, a message and the field it names (a
    dotted path into the body, a header, ``path`` or ``method``; null only on 429 and 5xx
    answers, which nothing in the request caused: `calimon.serve.errors`)."""

    status: int
    code: str
    message: str
    field: str | None = None
    errors: list[ErrorDetail] = []


class ErrorResponse(BaseModel):
    """Every 4xx and 5xx answer has this body."""

    error: ErrorBody


class Health(BaseModel):
    """``/healthz``: the service answers and its monitor is loaded."""

    status: Literal["ok"]
    uptime_s: float


class Info(BaseModel):
    """``/v1/info``: the policy, the monitor and the limits this server applies."""

    policy: str
    policy_hash: str
    model: str
    model_revision: str
    readout: str
    prompt: str
    template_hash: str
    head_tokens: int | None = Field(None, description="The template's tokens before the "
                                    "transcript, computed once and reused by every request.")
    truncation: dict[str, Any] = Field(default_factory=lambda: {"policy": "head_tail"},
                                       description="How a transcript over the input limit is "
                                       "read: head_tail, or the window policy.")
    calibration: str
    calibration_map: str | None
    t_low: float | None
    t_high: float | None
    batching: str
    limits: dict[str, int]
    forced: list[str]
