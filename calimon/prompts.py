"""Prompt templates (configs/prompts/*.yaml) and their encoding into token ids.

A model config's ``prompt_format`` picks how the pieces are laid out: ``chat`` (the default) renders
them with the tokenizer's chat template; ``plain`` (a base model without a usable template) writes
them as plain text, ``{system}\n\n{instructions, transcript, question}\n\nAnswer:`` and the
readout's assistant prefix, after the special tokens the tokenizer itself puts before a text
(its BOS, as configured).

Transcript text is untrusted: it is tokenized on its own with `split_special_tokens=True`, so a
string such as "<|im_start|>" inside a response becomes ordinary text tokens and can never act as
a chat-template control token. Only the template's own pieces are tokenized with special tokens.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from calimon.config import load_yaml_model, named_config_path
from calimon.defenses import (
    DefendedTranscript,
    after_transcript,
    defend_transcript,
    describe,
    instruction_notes,
    parse_defenses,
)
from calimon.errors import CalimonError, ConfigError

READOUTS = ("verdict", "json", "binary", "sampled", "verbal")
# Readouts a template need not define: their format comes from configs/readouts/<name>.yaml
# (`DerivedFormat`) unless the template gives its own.
DERIVED_READOUTS = ("sampled", "verbal")
PROMPT_FORMATS = ("chat", "plain")
PLAIN_ANSWER_CUE = "Answer:"
_REQ, _RESP = "\ue000CALIMON_REQUEST\ue000", "\ue000CALIMON_RESPONSE\ue000"


class ReadoutFormat(BaseModel):
    """How a readout asks: the question after the transcript, the assistant's prefix, for the
    generated readouts (``binary``, ``sampled``, ``verbal``) the tokens it may generate, and for
    ``sampled`` how many answers are drawn at which temperature."""

    model_config = ConfigDict(extra="forbid")
    question: str
    assistant_prefix: str = ""
    max_new_tokens: int = 0
    samples: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, gt=0)


class DerivedFormat(BaseModel):
    """A readout format every template gets (``configs/readouts/<name>.yaml``): either another
    format of the template (``from_format``) with its generation settings replaced, or a
    question of its own."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    name: str
    description: str = ""
    from_format: str | None = None
    question: str | None = None
    assistant_prefix: str = ""
    max_new_tokens: int = Field(ge=1)
    samples: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, gt=0)

    def format_in(self, template: PromptTemplate) -> ReadoutFormat:
        """This readout's format in ``template``."""
        base = template.format_for(self.from_format) if self.from_format else None
        question = base.question if base is not None else self.question
        if question is None:
            raise ConfigError(f"readout {self.name!r} names neither from_format nor question",
                              field=self.name)
        return ReadoutFormat(question=question, assistant_prefix=self.assistant_prefix,
                             max_new_tokens=self.max_new_tokens, samples=self.samples,
                             temperature=self.temperature)


class PromptTemplate(BaseModel):
    """A prompt template (``configs/prompts/<name>.yaml``) with one format per supported readout."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    name: str
    description: str = ""
    system: str
    instructions: str
    request_header: str
    response_header: str
    end_marker: str
    formats: dict[str, ReadoutFormat]
    # prompt defenses (`calimon.defenses`); None = undefended (and absent from the hash)
    defenses: tuple[str, ...] | None = None

    @field_validator("defenses", mode="before")
    @classmethod
    def _known_defenses(cls, value):
        try:
            return parse_defenses(value) or None
        except CalimonError as exc:
            raise ValueError(str(exc)) from None

    def with_defenses(self, defenses) -> PromptTemplate:
        """This template under ``defenses`` (names, `calimon.defenses.parse_defenses`); the
        same template for none."""
        names = parse_defenses(defenses)
        return self.model_copy(update={"defenses": names or None}) if names else self

    def template_hash(self, readout: str, prompt_format: str = "chat",
                      decoding: dict | None = None) -> str:
        """Identifies exactly what the model is shown for this readout (store key part); a
        non-chat ``prompt_format`` (``plain``, or ``messages`` for a chat API), a derived
        readout's format and a constrained ``decoding`` (`calimon.decoding.Constraint.describe`)
        are part of the hash (the hashes of other readouts, and of free decoding, are
        unchanged); so are the template's ``defenses`` (an undefended template's hash is
        unchanged)."""
        parts = [self.model_dump(exclude_none=True), readout] + \
            ([prompt_format] if prompt_format != "chat" else [])
        if decoding is not None:
            parts.append(decoding)
        if readout not in self.formats and readout in DERIVED_READOUTS:
            parts.append(self.format_for(readout).model_dump(exclude_none=True))
        if self.defenses:
            parts.append(describe(self.defenses))
        payload = json.dumps(parts, sort_keys=True).encode()
        return hashlib.sha256(payload).hexdigest()[:16]

    def format_for(self, readout: str) -> ReadoutFormat:
        """The format of ``readout`` (a derived readout's from configs/readouts when the
        template has none); raises ConfigError when the template lacks it."""
        if readout in self.formats:
            return self.formats[readout]
        if readout in DERIVED_READOUTS:
            return load_derived_format(readout).format_in(self)
        raise ConfigError(f"prompt {self.name!r} has no {readout!r} format; it supports "
                          f"{sorted(self.formats) + list(DERIVED_READOUTS)}", field="readout")


def load_derived_format(name: str) -> DerivedFormat:
    """The derived readout format ``configs/readouts/<name>.yaml``."""
    return load_yaml_model(named_config_path("readouts", name), DerivedFormat)


def load_prompt(name: str) -> PromptTemplate:
    """The template ``configs/prompts/<name>.yaml``; raises ConfigError when it is missing or
    invalid."""
    return load_yaml_model(named_config_path("prompts", name), PromptTemplate)


@dataclass(frozen=True)
class Truncation:
    """How a transcript was cut to fit: the policy and the token counts before, after and dropped
    from each part."""

    policy: str
    original_tokens: int
    kept_tokens: int
    dropped_request: int
    dropped_response: int


@dataclass(frozen=True)
class EncodedPrompt:
    """A transcript's prompt as token ids, where its response lies, and the response tokens'
    character offsets (``(-1, -1)`` for a truncation marker)."""

    ids: list[int]
    prefix_len: int  # tokens before the transcript: identical for every sample of a template
    response_start: int  # token index where the response text begins
    response_end: int
    truncation: Truncation | None = None
    response_token_offsets: list[tuple[int, int]] = field(default_factory=list, repr=False)
    defense: DefendedTranscript | None = field(default=None, repr=False)  # defended templates


class PromptEncoder:
    """Encodes (template, readout, request, response) into token ids for one tokenizer, laid out
    as ``prompt_format`` says (``chat`` or ``plain``; see the module docstring)."""

    def __init__(self, tokenizer, template: PromptTemplate, readout: str, max_input_tokens: int,
                 reserve_new_tokens: int | None = None, *, prompt_format: str = "chat"):
        if prompt_format not in PROMPT_FORMATS:
            raise ConfigError(f"prompt_format {prompt_format!r}: expected one of "
                              f"{list(PROMPT_FORMATS)}", field="prompt_format")
        self.tokenizer = tokenizer
        self.template = template
        self.readout = readout
        self.prompt_format = prompt_format
        self.fmt = template.format_for(readout)
        self.max_input_tokens = max_input_tokens
        reserve = self.fmt.max_new_tokens if reserve_new_tokens is None else reserve_new_tokens
        self._pieces = self._split_chat() if prompt_format == "chat" else self._split_plain()
        self._trusted_ids = [self._encode_trusted(p) for p in self._pieces]
        if prompt_format == "plain":
            self._trusted_ids[0] = self._leading_special_ids() + self._trusted_ids[0]
        fixed = sum(len(x) for x in self._trusted_ids)
        self.budget = max_input_tokens - fixed - reserve
        if self.budget < 64:
            raise ConfigError(f"max_input_tokens={max_input_tokens} leaves {self.budget} tokens "
                              "for the transcript; raise it", field="max_input_tokens")

    def _user_text(self) -> str:
        return user_text(self.template, self.fmt, _REQ, _RESP)

    def _split_chat(self) -> list[str]:
        messages = [{"role": "system", "content": self.template.system.strip()},
                    {"role": "user", "content": self._user_text()}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True,
                                                  enable_thinking=False)
        return _split_at_markers(text + self.fmt.assistant_prefix)

    def _split_plain(self) -> list[str]:
        prefix = self.fmt.assistant_prefix
        text = (f"{self.template.system.strip()}\n\n{self._user_text()}\n\n{PLAIN_ANSWER_CUE}"
                + (f" {prefix.lstrip()}" if prefix else ""))
        return _split_at_markers(text)

    def _leading_special_ids(self) -> list[int]:
        """The ids the tokenizer puts before any text by its own configuration (e.g. Gemma's
        ``<bos>``; none for a tokenizer that adds nothing)."""
        bare = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        full = self.tokenizer("a", add_special_tokens=True)["input_ids"]
        cut = next((i for i in range(len(full)) if full[i:i + len(bare)] == bare), 0)
        return list(full[:cut])

    def _encode_trusted(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _encode_untrusted(self, text: str, offsets: bool = False):
        enc = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True,
                             return_offsets_mapping=offsets)
        return (enc["input_ids"], enc["offset_mapping"]) if offsets else enc["input_ids"]

    @property
    def prefix_ids(self) -> list[int]:
        """The template's tokens before the transcript (the same for every sample)."""
        return self._trusted_ids[0]

    @property
    def prefix_len(self) -> int:
        """Length of `prefix_ids`."""
        return len(self._trusted_ids[0])

    def encode(self, request: str, response: str) -> EncodedPrompt:
        """The prompt of one transcript; a transcript over the budget is cut (head_tail) and says
        so in ``truncation``. A defended template's transcript text is defended first
        (`calimon.defenses`); the response token offsets still point into ``response``."""
        defended = defend_transcript(self.template, request, response)
        req = self._encode_untrusted(defended.request)
        resp, offsets = self._encode_untrusted(defended.response, offsets=True)
        offsets = [defended.response_offset(*o) for o in offsets]
        truncation = None
        if len(req) + len(resp) > self.budget:
            req, resp, offsets, truncation = self._truncate(req, resp, offsets)
        head, middle, tail = self._trusted_ids
        ids = head + req + middle + resp + tail
        start = len(head) + len(req) + len(middle)
        return EncodedPrompt(ids, len(head), start, start + len(resp), truncation, offsets,
                             defended if self.template.defenses else None)

    def _truncate(self, req, resp, offsets):
        """head_tail policy: drop the middle of the longer part(s), insert a visible marker."""
        original = len(req) + len(resp)
        marker = self._encode_untrusted("\n[... text truncated by calimon (head_tail) ...]\n")
        budget = self.budget
        # Give the request at most half the budget; the response keeps the rest.
        req_keep = min(len(req), max(budget // 2, budget - len(resp)))
        resp_keep = budget - req_keep
        new_req, drop_req = _head_tail(req, req_keep, marker)
        new_resp, drop_resp = _head_tail(resp, resp_keep, marker)
        if drop_resp:
            head_n = (resp_keep - len(marker)) // 2
            tail_n = resp_keep - len(marker) - head_n
            offsets = offsets[:head_n] + [(-1, -1)] * len(marker) + offsets[len(offsets) - tail_n:]
        trunc = Truncation("head_tail", original, len(new_req) + len(new_resp), drop_req, drop_resp)
        return new_req, new_resp, offsets, trunc


def user_text(template: PromptTemplate, fmt: ReadoutFormat, request: str, response: str) -> str:
    """The user turn of a monitor prompt: instructions, the transcript between its markers, and
    the readout's question; a defended template adds its notes to the instructions and its
    reminder after the end marker (the transcript text is given here already defended:
    `calimon.defenses.defend_transcript`)."""
    t, d = template, template.defenses or ()
    return (f"{t.instructions.strip()}{instruction_notes(d)}\n\n{t.request_header}\n{request}"
            f"\n\n{t.response_header}\n{response}\n{t.end_marker}{after_transcript(d)}\n\n"
            f"{fmt.question.strip()}")


@dataclass(frozen=True)
class ChatPrompt:
    """A monitor prompt as chat messages (system, user) for an API that takes messages, and the
    assistant's prefix the readout needs ("" for none)."""

    messages: list[dict[str, str]]
    assistant_prefix: str = ""
    defense: DefendedTranscript | None = field(default=None, repr=False, compare=False)


def chat_prompt(template: PromptTemplate, readout: str, request: str, response: str
                ) -> ChatPrompt:
    """The chat messages of one transcript: the same system and user text the ``chat`` layout
    renders with a tokenizer's template, the transcript inserted as plain text (the API's own
    template and tokenizer then apply; see docs/backends.md on control tokens). A defended
    template's transcript text is defended first (`calimon.defenses`)."""
    fmt = template.format_for(readout)
    d = defend_transcript(template, request, response)
    return ChatPrompt([{"role": "system", "content": template.system.strip()},
                       {"role": "user", "content": user_text(template, fmt, d.request,
                                                             d.response)}],
                      fmt.assistant_prefix, d if template.defenses else None)


def encoder_for(backend, template: PromptTemplate, readout: str, max_input_tokens: int,
                reserve_new_tokens: int | None = None) -> PromptEncoder:
    """The prompt encoder of a backend's model: its tokenizer and its config's ``prompt_format``
    (every backend path encodes prompts through this, so ``plain`` works on all of them)."""
    return PromptEncoder(backend.tokenizer, template, readout, max_input_tokens,
                         reserve_new_tokens, prompt_format=prompt_format_of(backend))


def prompt_format_of(backend) -> str:
    """The ``prompt_format`` of the backend's model config (``chat`` when it has none)."""
    ref = getattr(backend, "model_ref", None)
    return getattr(getattr(ref, "config", None), "prompt_format", "chat")


def _split_at_markers(text: str) -> list[str]:
    head, rest = text.split(_REQ)
    middle, tail = rest.split(_RESP)
    return [head, middle, tail]


def _head_tail(ids: list[int], keep: int, marker: list[int]) -> tuple[list[int], int]:
    if len(ids) <= keep:
        return ids, 0
    room = max(keep - len(marker), 2)
    head_n = room // 2
    tail_n = room - head_n
    return ids[:head_n] + marker + ids[len(ids) - tail_n:], len(ids) - head_n - tail_n
