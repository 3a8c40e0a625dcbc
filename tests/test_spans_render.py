from __future__ import annotations

import html
import re

import pytest

from calimon.errors import InputError
from calimon.numerics.span_metrics import ScoredSpan
from calimon.studies.spans.grounding import ground_quotes
from calimon.studies.spans.render import pieces, render_html, render_terminal

_TAG = re.compile(r"<[^>]+>")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _body(fragment: str) -> str:
    return fragment.split('<pre class="calimon-spans-text">')[1].split("</pre>")[0]


def test_pieces_split_overlaps_at_boundaries():
    got = pieces("abcdefghij", [(0, 8, 0.2), (2, 4, 0.9)], gold=[(6, 10)])
    assert got == [(0, 2, "pred", 0.2), (2, 4, "pred", 0.9), (4, 6, "pred", 0.2),
                   (6, 8, "both", 0.2), (8, 10, "gold", None)]


def test_html_overlap_hand_written():
    out = render_html("abcdefghij", [ScoredSpan(0, 6, 0.5)], gold=[(3, 9)])
    assert _body(out) == ('<mark class="pred" data-score="0.5" title="score 0.5">abc</mark>'
                          '<mark class="both" data-score="0.5" title="score 0.5">def</mark>'
                          '<mark class="gold">ghi</mark>j')


def test_html_escapes_untrusted_transcript_and_title():
    text = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'
    out = render_html(text, [(0, 8, 1.0)], gold=[(30, 35)], title="<b onclick='x'>t</b>")
    assert "<script" not in out and "<img" not in out and "<b " not in out
    assert '<mark class="pred" data-score="1" title="score 1">&lt;script&gt;</mark>' in out
    assert '<mark class="gold">&lt;img </mark>src=x onerror=alert(1)&gt;' in out
    assert "&lt;b onclick=&#x27;x&#x27;&gt;t&lt;/b&gt;" in out
    assert html.unescape(_TAG.sub("", _body(out))) == text  # nothing lost, nothing added


def test_html_without_spans_and_ungrounded_quotes():
    text = "plain text"
    spans = ground_quotes(["plain", "absent quote here"], text)
    out = render_html(text, spans)
    assert _body(out) == '<mark class="pred">plain</mark> text'


def test_terminal_plain_markers_and_legend():
    out = render_terminal("abcdefghij", [(0, 6, 0.5)], gold=[(3, 9)], color=False)
    lines = out.splitlines()
    assert lines[0] == "[[abc]]<<def>>{{ghi}}j"
    assert lines[2] == "legend: [[predicted]] {{gold}} <<both>>"
    assert lines[3] == "  1. [0, 6) score=0.5  abcdef"


def test_terminal_color_strips_back_to_text():
    text = "line one\nline two"
    out = render_terminal(text, [(5, 13, 0.7)], color=True, show_scores=False)
    assert "\x1b[30;43m" in out
    first = out.split("\n\nlegend")[0]
    assert _ANSI.sub("", first) == text
    assert "\x1b[30;43mone\x1b[0m\n\x1b[30;43mline\x1b[0m" in first  # per-line colouring


def test_terminal_neutralizes_control_characters():
    text = "ok \x1b]0;pwned\x07 \x1b[2J \u202eevil\r\nnext"
    out = render_terminal(text, [(0, 2)], color=False)
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned\\x07" in out and "\\u202e" in out
    assert "\r" not in out and "\nnext" in out
    colored = render_terminal(text, [(0, 2)], color=True)
    assert "\x1b]" not in colored and "\x1b[2J" not in colored


def test_render_validates_spans():
    with pytest.raises(InputError, match="spans"):
        render_html("abc", [(0, 9)])
    with pytest.raises(InputError, match="gold"):
        render_terminal("abc", [], gold=[(2, 1)], color=False)


def test_html_legend_names_only_the_kinds_of_mark_drawn():
    def legend(out: str) -> list[str]:
        found = re.search(r'<div class="calimon-spans-legend">(.*?)</div>', out)
        return re.findall(r'<mark class="(\w+)">', found.group(1)) if found else []

    assert legend(render_html("plain text", [])) == []  # nothing drawn: no legend at all
    assert legend(render_html("plain text", [], gold=[(0, 5)])) == ["gold"]
    assert legend(render_html("abcdefghij", [(0, 6, 0.5)], gold=[(3, 9)])) == [
        "pred", "gold", "both"]
    assert legend(render_html("abcdefghij", [(0, 3, 0.5)])) == ["pred"]
