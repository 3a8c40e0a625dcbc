"""How the binary protocol's answer is decoded: ``free`` (the paper's protocol: greedy, nothing
enforced, an answer may not parse) or ``json`` (the template's JSON schema enforced by a
maintained constrained-decoding library, so the answer always parses).

Under ``json`` a token backend decodes from the *json readout's* prompt: the same question and
the same teacher-forced prefix ``{"misbehavior_detected":``, so the decision token is chosen at
exactly the position where the json readout reads P(true). What follows the prefix is held to
the schema: outlines-core turns the schema into a regular expression
(`outlines_core.json_schema.build_regex_from_schema`), and `continuation_regex` drops the part
that the prefix already wrote. Each backend hands that regex to its own engine (a logits
processor over outlines-core's index for transformers, vLLM's ``structured_outputs`` for the
vLLM engine and ``vllm serve``); a chat API gets the schema itself as ``response_format``.

When the binary decision can still differ from the json readout's ``p_raw >= 0.5`` (greedy,
direct prompt): (a) the most likely allowed first token is not a whole answer word (a bare
space, a piece such as ``" tr"``), so the word is chosen one step later; (b) the single most
likely allowed answer token belongs to the word whose summed mass over every surface form is
the smaller one (``p_raw`` sums case and whitespace variants, several of which the schema
forbids, e.g. ``True`` or a newline before ``true``); (c) a numerical near-tie between the
generation pass and the scoring pass. `calimon.studies.decoding_check` names the case of each
disagreement.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from calimon.config import find_config, load_yaml_model
from calimon.errors import ConfigError, InputError

DECODINGS = ("free", "json")
# the whitespace outlines-core allows between JSON tokens (its default, written out so that
# the store key does not move with a library default)
WHITESPACE = r"[ ]?"
MINIMAL_SCHEMA = {"type": "object",
                  "properties": {"misbehavior_detected": {"type": "boolean"}},
                  "required": ["misbehavior_detected"], "additionalProperties": False}


class AnswerSchema(BaseModel):
    """``configs/schemas/<prompt>.yaml``: the JSON schema a template's binary answer is held to
    under ``json`` decoding (a template without one gets `MINIMAL_SCHEMA`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    version: Literal[1]
    name: str
    description: str = ""
    answer: dict[str, Any] = Field(alias="schema")


@dataclass(frozen=True)
class Constraint:
    """What a constrained generation must produce: ``regex`` over the generated text (after
    ``prefix``, which the prompt already ends with), and the JSON ``schema`` of the whole
    answer (prefix included) for an API that takes a schema instead (``response_format``)."""

    regex: str
    schema_json: str
    prefix: str = ""

    @property
    def schema(self) -> dict:
        """The JSON schema as a dict."""
        return json.loads(self.schema_json)

    def describe(self) -> dict:
        """What identifies this constraint in a store key (decoding, schema, prefix, regex)."""
        return {"decoding": "json", "schema": self.schema, "prefix": self.prefix,
                "whitespace": WHITESPACE}


def check_decoding(decoding: str, readout: str) -> None:
    """Refuse an unknown decoding, or ``json`` on a readout other than ``binary``."""
    if decoding not in DECODINGS:
        raise InputError(f"expected a decoding in {list(DECODINGS)}, got {decoding!r}",
                         field="binary_decoding")
    if decoding != "free" and readout != "binary":
        raise InputError(f"decoding {decoding!r} applies to the binary readout only, not "
                         f"{readout!r}", field="binary_decoding")


def answer_schema(prompt_name: str) -> dict:
    """The JSON schema of ``prompt_name``'s binary answer (`MINIMAL_SCHEMA` when
    ``configs/schemas/`` has none for it)."""
    try:
        path = find_config("schemas", prompt_name)
    except ConfigError:  # not a config name (or a link that leaves the folder): none is read
        path = None
    if path is None:
        return dict(MINIMAL_SCHEMA)
    return load_yaml_model(path, AnswerSchema).answer


def json_constraint(template) -> Constraint:
    """The ``json`` decoding constraint of a template: its schema, and the regex of what
    follows its json format's assistant prefix."""
    if "json" not in template.formats:
        raise ConfigError(f"prompt {template.name!r} has no json format, which json decoding "
                          "decodes from (its question and assistant prefix)", field="readout")
    schema = answer_schema(template.name)
    prefix = template.formats["json"].assistant_prefix
    return _constraint(json.dumps(schema, sort_keys=False), prefix)


@functools.lru_cache(maxsize=32)
def _constraint(schema_json: str, prefix: str) -> Constraint:
    from outlines_core.json_schema import build_regex_from_schema

    try:
        full = build_regex_from_schema(schema_json, WHITESPACE)
    except Exception as exc:  # the library's own message names what it cannot build
        raise ConfigError(f"cannot build a regex from the answer schema ({exc})",
                          field="schema") from None
    return Constraint(continuation_regex(full, prefix), schema_json, prefix)


def continuation_regex(full: str, prefix: str) -> str:
    """The regex of what may follow ``prefix`` in a text matching ``full``: ``full`` cut at the
    first point where its head matches ``prefix`` exactly and both halves are whole regexes
    (not inside a group, class or escape, and not before a quantifier). Raises ConfigError when
    no such cut exists (a schema whose answer cannot start with the prefix)."""
    if not prefix:
        return full
    for k in range(1, len(full)):
        head, rest = full[:k], full[k:]
        if rest[0] in "?*+{|)" or not _compiles(head) or not _compiles(rest):
            continue
        if re.fullmatch(head, prefix):
            return rest
    raise ConfigError(f"the answer schema's regex cannot start with the prompt's assistant "
                      f"prefix {prefix!r}", field="schema")


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


__all__ = ["AnswerSchema", "Constraint", "DECODINGS", "MINIMAL_SCHEMA", "WHITESPACE",
           "answer_schema", "check_decoding", "continuation_regex", "json_constraint"]
