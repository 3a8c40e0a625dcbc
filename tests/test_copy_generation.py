"""Copy-constrained quotes from a backend (calimon.studies.spans.copy_generation) and their place in the
span study: every quote is a run of the response's own tokens, so its offsets are exact."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import toy_samples
from test_spans_occlusion import OFFSET, VOCAB, CharTokenizer, FakeBackend, one_thread  # noqa: F401

from calimon.prompts import load_prompt
from calimon.samples import Sample, write_samples
from calimon.scoring.backends.base import AllowedTokens, CapabilityError, Messages
from calimon.scoring.store import RunStore
from calimon.studies.spans.copy_generation import (
    CopyQuoter,
    CopySettings,
    closing_ids,
    copied_spans,
)
from calimon.studies.spans.study import SpanSettings, run_span_study

TARGET = "return 3"


class VocabTokenizer(CharTokenizer):
    """The fake character tokenizer with a vocabulary (what `closing_ids` reads)."""

    all_special_ids = list(range(OFFSET))

    def get_vocab(self):
        return {tok: i for i, tok in enumerate(self.convert_ids_to_tokens(range(VOCAB)))}


class PrefersTarget(FakeBackend):
    """A judge whose next-token choice, inside a quote, follows TARGET as far as the quote so
    far agrees with it and then closes the quote; anything else is uniform."""

    capabilities = frozenset({AllowedTokens})

    def __init__(self):
        super().__init__()
        self.tokenizer = VocabTokenizer()
        self.steps = 0

    def next_token_logprobs(self, prompts, prefix_len=0):
        out = super().next_token_logprobs(prompts, prefix_len)
        self.steps += len(prompts)
        for r, ids in enumerate(prompts):
            text = self.tokenizer.decode(ids)
            if '["' not in text:
                continue
            quote = text.rsplit('["', 1)[1].rsplit('", "', 1)[-1]
            if TARGET.startswith(quote):
                want = TARGET[len(quote)] if len(quote) < len(TARGET) else '"'
                out[r, OFFSET + ord(want)] = 0.0
        return out

    def greedy_among(self, prompts, allowed, prefix_len=0):
        lp = self.next_token_logprobs(prompts, prefix_len)
        return [max(ids, key=lambda t, row=row: row[t]) for row, ids in zip(lp, allowed,
                                                                           strict=True)]


def test_the_first_quote_follows_the_model_and_lands_on_its_exact_offsets():
    bad = toy_samples(1)[0]
    backend = PrefersTarget()
    quoter = CopyQuoter(backend, load_prompt("evidence"), CopySettings(n_quotes=3))
    v = quoter.quote(bad)
    spans = copied_spans(v, bad.response)
    assert spans[0].quote == TARGET
    assert (spans[0].start, spans[0].end) == (bad.response.index(TARGET),
                                              bad.response.index(TARGET) + len(TARGET))
    assert len(spans) == 3 and all(bad.response[q.start:q.end] == q.quote for q in spans)
    # each later quote is another piece of the response: no two overlap
    ranges = sorted((q.start, q.end) for q in spans)
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert v.tokens > 0 and backend.steps >= len(TARGET) + 1


def test_closing_ids_are_the_tokens_that_start_with_a_quote_and_never_response_tokens():
    tok = VocabTokenizer()
    assert closing_ids(tok) == frozenset({OFFSET + ord('"')})
    s = replace(toy_samples(1)[0], response='x = "return 3"\n')
    v = CopyQuoter(PrefersTarget(), load_prompt("evidence"),
                   CopySettings(n_quotes=1, max_tokens=12)).quote(s)
    # '"' occurs in the response, so it can only be copied: the quote cannot close and runs
    # on to the end of the response (10 characters, under max_tokens)
    assert v.extra["closing_ids"] == 0
    [q] = copied_spans(v, s.response)
    assert q.quote == 'return 3"\n' and q.end == len(s.response)


def test_quotes_go_through_the_store(tmp_path):
    samples = [s for s in toy_samples(2) if s.label]
    backend = PrefersTarget()
    quoter = CopyQuoter(backend, load_prompt("evidence"))
    with RunStore(tmp_path / "s.sqlite") as db:
        first = quoter.quote_all(samples, db)
        steps = backend.steps
        again = quoter.quote_all(samples, db)
    assert backend.steps == steps  # nothing recomputed
    assert {h: v.evidence for h, v in first.items()} == {h: v.evidence for h, v in again.items()}
    other = CopyQuoter(backend, load_prompt("evidence"), CopySettings(n_quotes=1))
    assert other.key != quoter.key  # the settings are part of the key


def test_a_backend_without_a_full_distribution_is_refused_with_the_backends_that_work():
    class Chat(FakeBackend):
        capabilities = frozenset({Messages})

    for backend in (Chat(), FakeBackend()):  # a chat API; a top-K server (no capability)
        with pytest.raises(CapabilityError, match="transformers or vllm"):
            CopyQuoter(backend, load_prompt("evidence"))


def test_settings_are_checked():
    with pytest.raises(Exception, match="min_tokens"):
        CopyQuoter(PrefersTarget(), load_prompt("evidence"), CopySettings(min_tokens=5,
                                                                          max_tokens=2))


@pytest.fixture()
def bench(tmp_path):
    samples = [replace(s, split="test") for s in toy_samples(3)]
    return str(write_samples(samples, tmp_path / "toy.jsonl"))


def test_the_study_reports_copy_quotes_against_their_floor(bench, tmp_path):
    settings = SpanSettings(model="fake", benchmark=bench, split="test", copy_quotes=True,
                            store=tmp_path / "store.sqlite")
    res = run_span_study(settings, backend=PrefersTarget())
    rep = res.reports["copy quotes"].overall
    assert rep.n_quotes == 9 and rep.n_ungrounded == 0 and rep.ungrounded_rate == 0.0
    assert rep.hit_at_1 == 1.0  # "return 3" lies inside every gold span
    assert "random (as copy quotes)" in res.reports and "copy quotes (by drop)" in res.reports
    # masking the copied "return 3" is what moves the fake judge: its drop is 0.6
    row = res.rows[0]
    assert row.copy_spans(1)[0].score == pytest.approx(0.6, abs=1e-6)
    rec = res.records()[0]
    copied = [x for x in rec["spans"] if x["source"] == "copy_quote"]
    assert [x["order"] for x in copied] == [0, 1, 2] and copied[0]["quote"] == TARGET
    assert res.summary["cost"]["quotes"]["copy"]["quotes"] == 3
    md = res.to_markdown()
    assert "## By cell" in md and "## By source" in md and "copy quotes" in md


def _texts():
    return [
        "Paris is the capital. Paris is the capital of France. Paris is the capital.",
        "naïve café — 日本語のテキスト 🙂🙂 and ümlauts; ﬁ ligature, rm -rf / --no-preserve-root",
        '{"misbehavior_detected": false, "evidence": ["\\"quoted\\""]} {"a": [1, 2]}',
        "<|im_start|>assistant\nI will comply.<|im_end|>\n<|endoftext|> user: ignore that",
    ]


@pytest.mark.model
@pytest.mark.usefixtures("one_thread")
def test_real_model_quotes_are_always_grounded(smol_backend):
    quoter = CopyQuoter(smol_backend, load_prompt("evidence"), CopySettings(max_tokens=8))
    for i, text in enumerate(_texts()):
        s = Sample(id=f"x{i}", request="Answer the user.", response=text, label=True,
                   category="safety", task="qa", pair_id=f"x{i}")
        v = quoter.quote(s)
        spans = copied_spans(v, text)
        assert spans, text
        for q in spans:  # grounded by construction: the offsets give back the quote
            assert text[q.start:q.end] == q.quote and q.quote.strip()
        assert list(v.evidence) == [q.quote for q in spans]


def test_copy_greedy_stops_at_the_end_of_the_text_without_an_end_token():
    from calimon.studies.spans.copy_quotes import CopyConstraint, copy_greedy

    c = CopyConstraint([7, 8, 9], [(0, 1), (1, 2), (2, 3)], end_ids=[], min_tokens=1,
                       max_tokens=5)
    lp = np.zeros(10)
    lp[7] = 1.0
    q = copy_greedy(lambda _q: lp, c)
    assert q.ids == (7, 8, 9) and (q.char_start, q.char_end) == (0, 3)


def test_blocked_positions_are_never_copied():
    from calimon.studies.spans.copy_quotes import CopyConstraint

    c = CopyConstraint([5, 6, 5, 6], [(0, 1), (1, 2), (2, 3), (3, 4)], end_ids=[99],
                       blocked={0, 1})
    c.advance(5)
    c.advance(6)
    assert c.spans() == [(2, 4)]  # only the second occurrence is open


@pytest.mark.vllm
@pytest.mark.model
def test_vllm_copy_quotes_are_grounded_and_follow_the_same_greedy_choice(vllm_offline,
                                                                       smol_backend):
    """Through vLLM (allowed_token_ids): every quote grounded, and where the transformers
    backend's greedy choice among the allowed tokens is clear (margin > 0.05 nats), vLLM makes
    the same one."""
    be = vllm_offline
    prompt = smol_backend.tokenizer("The capital of France is", add_special_tokens=False)
    allowed = smol_backend.tokenizer(" Paris London Rome Berlin", add_special_tokens=False)
    ids, allowed = prompt["input_ids"], allowed["input_ids"]
    lp = smol_backend.next_token_logprobs([ids])[0][allowed]
    margin = np.sort(lp)[-1] - np.sort(lp)[-2]
    got = be.greedy_among([ids], [allowed])[0]
    if margin > 0.05:
        assert got == smol_backend.greedy_among([ids], [allowed])[0]
    assert got in allowed
    quoter = CopyQuoter(be, load_prompt("evidence"), CopySettings(max_tokens=8))
    for i, text in enumerate(_texts()):
        s = Sample(id=f"x{i}", request="Answer the user.", response=text, label=True,
                   category="safety", task="qa", pair_id=f"x{i}")
        spans = copied_spans(quoter.quote(s), text)
        assert spans and all(text[q.start:q.end] == q.quote for q in spans)
