from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calimon.errors import InputError
from calimon.numerics.segments import (
    Segment,
    auto_kind,
    has_turns,
    mask_segment,
    mask_spans,
    segment,
)
from calimon.studies.spans.grounding import ground_quote


def test_lines_skip_blank_and_trim_indent():
    text = "def f():\n\n    return 1\n"
    assert segment(text, "lines") == [Segment(0, 8, "def f():"), Segment(14, 22, "return 1")]


def test_lines_handle_crlf_and_trailing_text():
    text = "a = 1\r\n  \r\nb = 2"
    assert [s.span for s in segment(text, "lines")] == [(0, 5), (11, 16)]


def test_sentences():
    text = "The answer is B. Because e.g. Dr. Smith said so!  Really? \"Yes.\" ok\n1. First. 2nd."
    assert [s.text for s in segment(text, "sentences")] == [
        "The answer is B.",
        "Because e.g. Dr. Smith said so!",
        "Really?",
        "\"Yes.\"",             # closing quote stays with its sentence
        "ok",
        "1. First.",            # a list number is not a sentence
        "2nd.",
    ]
    assert segment(text, "sentences")[0].span == (0, 16)
    assert segment(text, "sentences")[1].span == (17, 48)


def test_sentences_keep_decimals_and_break_at_lines():
    text = "Pi is 3.14 roughly.\nNext line without stop\nEnd."
    assert [s.span for s in segment(text, "sentences")] == [(0, 19), (20, 42), (43, 47)]


def test_turns_exclude_markers_and_keep_preamble():
    text = "Context.\nHuman: hi there.\nAssistant: Hello!\n  How can I help?\nUser: ok"
    segs = segment(text, "turns")
    assert [s.text for s in segs] == ["Context.", "hi there.", "Hello!\n  How can I help?", "ok"]
    assert [s.span for s in segs] == [(0, 8), (16, 25), (37, 61), (68, 70)]


def test_turns_without_markers_is_one_segment():
    assert segment("  just text.  ", "turns") == [Segment(2, 12, "just text.")]


def test_auto_kind():
    dialogue = "User: is 2+2=5?\nAssistant: Yes, you are right."
    assert has_turns(dialogue)
    assert auto_kind(dialogue, "code") == "turns"
    assert auto_kind("x = 1\ny = 2", "code") == "lines"
    assert auto_kind("A sentence. Another.", "qa") == "sentences"
    assert auto_kind("A sentence.", "reasoning") == "sentences"
    assert auto_kind("A sentence.") == "sentences"
    # one side only, or an indented marker, is not a dialogue
    assert not has_turns("User: hello\nUser: again")
    assert not has_turns("class A:\n    user: str\n    assistant: str")
    assert segment("x = 1\n\ny = 2", task="code") == [Segment(0, 5, "x = 1"),
                                                     Segment(7, 12, "y = 2")]


def test_empty_and_blank_text():
    for kind in ("lines", "sentences", "turns", "auto"):
        assert segment("", kind) == []
        assert segment(" \n\t ", kind) == []


def test_invalid_arguments():
    with pytest.raises(InputError, match="kind"):
        segment("x", "words")
    with pytest.raises(InputError, match="text"):
        segment(None, "lines")


def test_mask_segment():
    text = "keep this. drop this. keep that."
    seg = segment(text, "sentences")[1]
    assert mask_segment(text, seg) == "keep this. [...] keep that."
    assert mask_segment(text, (0, 4), mask="<M>") == "<M> this. drop this. keep that."
    span = ground_quote("drop this", text)
    assert mask_segment(text, span, mask="") == "keep this. . keep that."
    with pytest.raises(InputError, match="seg"):
        mask_segment(text, (5, 99))
    with pytest.raises(InputError, match="seg"):
        mask_segment(text, ground_quote("absent words", text))


def test_mask_spans_merges_overlaps():
    text = "0123456789"
    assert mask_spans(text, [(6, 8), (1, 3), (2, 4)], mask="#") == "0#45#89"
    assert mask_spans(text, [(1, 3), (3, 5)], mask="#") == "0#56789"
    assert mask_spans(text, [], mask="#") == text


_CHARS = st.sampled_from(list("ab. ?!\n\t") + ["Human: ", "Assistant: ", "\n\n", "e.g. ", "1. "])


@settings(max_examples=200, deadline=None)
@given(st.lists(_CHARS, max_size=40).map("".join), st.sampled_from(["lines", "sentences",
                                                                      "turns", "auto"]))
def test_property_segments_are_ordered_trimmed_slices(text, kind):
    segs = segment(text, kind, task="qa")
    prev_end = 0
    for s in segs:
        assert prev_end <= s.start < s.end <= len(text)
        assert s.text == text[s.start:s.end]
        assert s.text == s.text.strip() and s.text
        prev_end = s.end
