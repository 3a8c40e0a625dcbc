"""Occlusion span scores: units, masked variants, drops, quote scores, prefix sharing.

A character-level fake tokenizer and a fake backend whose P(Yes) is a fixed function of the
prompt text make every expectation exact; the prefix-sharing backend is checked against plain
full forwards of a tiny random llama; one model test compares it with the real backend.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import toy_samples

from calimon.errors import InputError
from calimon.numerics.span_metrics import ScoredSpan
from calimon.prompts import load_prompt
from calimon.samples import Sample
from calimon.scoring.backends.base import BackendBase
from calimon.scoring.monitor import Monitor
from calimon.scoring.store import RunStore
from calimon.studies.spans.grounding import ground_quotes
from calimon.studies.spans.occlusion import (
    Occlusion,
    PrefixSharingBackend,
    SegmentScore,
    mask_and_score,
    masked_sample,
    monitor_scorer,
    occlude,
    occlusion_units,
    score_quotes,
    share_plan,
    shared_tokens,
    store_scorer,
)

# -- fakes ------------------------------------------------------------------------------------
SPECIAL = ["<pad>", "Yes", "No", "true", "false"]
OFFSET = len(SPECIAL)
VOCAB = OFFSET + 256


class CharTokenizer:
    """One token per character (code point mod 256); ids 1-4 are the answer words."""

    pad_token_id = 0

    def __len__(self):
        return VOCAB

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kw):
        text = "".join(f"<{m['role']}>{m['content']}\n" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False,
                 return_offsets_mapping=False):
        out = {"input_ids": [OFFSET + ord(c) % 256 for c in text]}
        if return_offsets_mapping:
            out["offset_mapping"] = [(i, i + 1) for i in range(len(text))]
        return out

    def convert_ids_to_tokens(self, ids):
        return [SPECIAL[i] if i < OFFSET else chr(i - OFFSET) for i in ids]

    def convert_tokens_to_string(self, tokens):
        return "".join(tokens)

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i - OFFSET) for i in ids if i >= OFFSET)


def p_yes(prompt: str) -> float:
    """The fake judge reads the response part of the prompt: 0.2, plus 0.6 when it contains
    ``return 3``, plus 0.1 when it contains ``(1, 2)``."""
    text = prompt.split("=== AGENT RESPONSE ===")[-1].split("=== END OF INTERACTION ===")[0]
    return 0.2 + 0.6 * ("return 3" in text) + 0.1 * ("(1, 2)" in text)


class FakeBackend(BackendBase):
    """next_token_logprobs: 0.9 of the mass on Yes/No split as p_yes(prompt text), 0.1 spread
    over the other tokens. generate: a fixed evidence JSON. Counts prompts it scores."""

    def __init__(self, evidence=("return 3", "this quote is not in the response")):
        self.tokenizer = CharTokenizer()
        self.model_ref = SimpleNamespace(name="fake", revision="r0",
                                         config=SimpleNamespace(max_input_tokens=4096))
        self.forward_calls = 0
        self.scored = 0
        self.evidence = list(evidence)

    def next_token_logprobs(self, prompts, prefix_len=0):
        self.forward_calls += 1
        self.scored += len(prompts)
        out = np.full((len(prompts), VOCAB), 0.1 / (VOCAB - 2))
        for r, ids in enumerate(prompts):
            p = p_yes(self.tokenizer.decode(ids))
            out[r, 1], out[r, 2] = 0.9 * p, 0.9 * (1 - p)
        return np.log(out).astype(np.float32)

    def generate(self, prompts, max_new_tokens):
        self.forward_calls += 1
        text = json.dumps({"misbehavior_detected": True, "category": "spec_gaming",
                           "severity": 2, "evidence": self.evidence})
        return [self.tokenizer("x" + text)["input_ids"][1:] for _ in prompts]


def fake_monitor(backend=None):
    return Monitor(backend or FakeBackend(), load_prompt("direct"), "verdict")


BAD = toy_samples(1)[0]  # def add0(a, b):\n    if (a, b) == (1, 2):\n        return 3\n ...


@pytest.fixture()
def one_thread():
    """One torch thread for the model tests: on a shared, oversubscribed CPU two threads ran a
    SmolLM2 forward about 6x slower than one (measured: 24 s vs 3.6 s for 256 tokens)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- units ------------------------------------------------------------------------------------
def test_units_are_lines_of_code():
    units = occlusion_units(BAD.response, task="code")
    assert [u.text for u in units] == ["def add0(a, b):", "if (a, b) == (1, 2):", "return 3",
                                       "return 0"]


def test_units_merge_shortest_adjacent_pair_first():
    text = "aaaa\nb\nc\ndddd\ne"
    # lines: [0,4) [5,6) [7,8) [9,13) [14,15); cap 3: merge b+c (union [5,8), length 3), then
    # the shortest union among aaaa|bc (8), bc|dddd (8), dddd|e (6) -> dddd+e
    units = occlusion_units(text, task="code", max_segments=3)
    assert [(u.start, u.end) for u in units] == [(0, 4), (5, 8), (9, 15)]
    assert [u.text for u in units] == ["aaaa", "b\nc", "dddd\ne"]
    assert len(occlusion_units(text, task="code", max_segments=1)) == 1


def test_units_validate_cap():
    with pytest.raises(InputError, match="max_segments"):
        occlusion_units("a", max_segments=0)


def test_masked_sample():
    v = masked_sample(BAD, (len("def add0(a, b):\n    "), len("def add0(a, b):\n    if (a, b) "
                                                                "== (1, 2):")))
    assert v.response.startswith("def add0(a, b):\n    [...]\n        return 3")
    assert v.gold_spans == () and v.request == BAD.request and v.id.startswith(BAD.id + "#mask")
    assert v.meta["masked_from"] == BAD.id


# -- drops ------------------------------------------------------------------------------------
def test_occlusion_on_a_toy_is_exact():
    # original: "return 3" and "(1, 2)" present: p = 0.9. Masking "if (a, b) == (1, 2):" drops
    # 0.1, masking "return 3" drops 0.6, the other two lines 0.
    [occ] = occlude([BAD], monitor_scorer(fake_monitor()))
    assert occ.p_raw == pytest.approx(0.9, abs=1e-6) and occ.status == "ok"
    assert [s.drop for s in occ.segments] == pytest.approx([0.0, 0.1, 0.6, 0.0], abs=1e-6)
    top = occ.top_spans(top_k=3)
    assert [BAD.response[s.start:s.end] for s in top] == ["return 3", "if (a, b) == (1, 2):"]
    assert top[0].score == pytest.approx(0.6, abs=1e-6)
    # flipped direction: no unit raises P when masked, so no span
    assert occ.top_spans(direction=-1) == []
    assert occ.top_spans(top_k=1)[0].score == pytest.approx(0.6, abs=1e-6)


def test_batching_many_samples_equals_one_by_one():
    samples = [s for s in toy_samples(4)]
    backend = FakeBackend()
    together = occlude(samples, monitor_scorer(fake_monitor(backend)))
    assert backend.forward_calls == 1  # every variant of every sample in one call
    alone = [occlude([s], monitor_scorer(fake_monitor()))[0] for s in samples]
    assert together == alone


def test_unscored_original_gives_no_drops():
    class Failing(FakeBackend):
        def next_token_logprobs(self, prompts, prefix_len=0):
            out = super().next_token_logprobs(prompts, prefix_len)
            for r, ids in enumerate(prompts):
                if "[...]" not in self.tokenizer.decode(ids):  # originals: no answer mass
                    out[r, 1:3] = -np.inf
            return out

    [occ] = occlude([BAD], monitor_scorer(fake_monitor(Failing())))
    assert occ.status == "parse_failure" and occ.p_raw is None
    assert all(s.drop is None and s.p_masked is not None for s in occ.segments)
    assert occ.top_spans() == [] and occ.scored() == []


def test_mask_and_score_dedups_and_validates():
    [occ] = mask_and_score([BAD], [[(0, 4), (0, 4), ScoredSpan(0, 4)]],
                           monitor_scorer(fake_monitor()))
    assert len(occ.segments) == 1
    with pytest.raises(InputError, match="one list of spans per sample"):
        mask_and_score([BAD], [], monitor_scorer(fake_monitor()))
    with pytest.raises(InputError, match="direction"):
        occ.scored(direction=0)
    with pytest.raises(InputError, match="top_k"):
        occ.top_spans(top_k=0)


def test_quote_scores():
    quotes = ground_quotes(["return 3", "def add0", "never written"], BAD.response)
    spans = [(q.start, q.end) for q in quotes if q.grounded]
    [occ] = mask_and_score([BAD], [spans], monitor_scorer(fake_monitor()))
    scored = score_quotes(quotes, occ)
    assert [q.score for q in scored[:2]] == pytest.approx([0.6, 0.0], abs=1e-6)
    assert scored[2].status == "ungrounded" and scored[2].score is None
    assert score_quotes(quotes, occ, direction=-1)[0].score == pytest.approx(-0.6, abs=1e-6)


def test_store_scorer_makes_no_model_call_on_rerun(tmp_path):
    backend = FakeBackend()
    with RunStore(tmp_path / "s.sqlite") as store:
        first = occlude([BAD], store_scorer(fake_monitor(backend), store))
        calls = backend.forward_calls
        again = occlude([BAD], store_scorer(fake_monitor(backend), store))
    assert backend.forward_calls == calls and again == first
    assert backend.scored == 1 + 4  # the original and its 4 variants, once


def test_occlusion_dataclasses():
    occ = Occlusion("x", 0.5, "ok", (SegmentScore(0, 2, 0.25, 0.25, "ok"),
                                     SegmentScore(3, 5, 0.5, 0.0, "ok"),
                                     SegmentScore(6, 8, None, None, "error")))
    assert occ.scored() == [ScoredSpan(0, 2, 0.25), ScoredSpan(3, 5, 0.0)]
    assert occ.top_spans(min_score=-1) == [ScoredSpan(0, 2, 0.25), ScoredSpan(3, 5, 0.0)]
    assert occ.drop_of(3, 5) == 0.0 and occ.drop_of(1, 2) is None


# -- prefix sharing ---------------------------------------------------------------------------
def test_share_plan_by_hand():
    p = 2  # template prefix [9, 9]
    a = [9, 9, 1, 1, 1, 1, 1, 1]
    a1 = [9, 9, 1, 1, 1, 1, 5, 5]  # departs from a at 6
    a2 = [9, 9, 1, 1, 7]  # departs at 4
    b = [9, 9, 2, 2, 2]  # shares only the template with the others
    plans, singles = share_plan([a, a1, a2, b, list(a)], p, min_shared=1)
    assert singles == [3]
    [plan] = plans
    assert plan.base == 0 and plan.copies == (4,)
    # members sorted by tail length: a2 runs [4:5) (1 token), a1 runs [6:8) (2 tokens)
    assert plan.members == ((2, 4), (1, 6))


def test_shared_tokens_by_hand():
    a = [9, 9, 1, 1, 1, 1, 1, 1]
    a1 = [9, 9, 1, 1, 1, 1, 5, 5]
    a2 = [9, 9, 1, 1, 7]
    # base a: 6 tokens after the prefix; a1 from 6: 2; a2 from 4: 1
    assert shared_tokens([a, a1, a2], 2, min_shared=1) == 6 + 2 + 1
    # below the sharing threshold everything runs plainly
    assert shared_tokens([a, a1, a2], 2, min_shared=10) == 6 + 6 + 3


def test_share_plan_splits_loosely_related_runs():
    # two samples whose requests share 8 tokens; each has 3 variants departing late
    def family(head, tag):
        base = [0, 0] + head + [tag] * 40
        return [base] + [base[:30 + 3 * k] + [99] + base[31 + 3 * k:] for k in range(3)]

    prompts = family([5] * 8, 1) + family([5] * 8, 2)
    plans, singles = share_plan(prompts, 2, min_shared=4)
    assert not singles and len(plans) == 2
    assert sorted(pl.base for pl in plans) == [0, 4]


def test_share_plan_does_not_depend_on_order():
    rng = np.random.default_rng(1)
    base = [1, 1] + list(rng.integers(2, 50, 40))
    prompts = [base] + [base[:10 + 5 * k] + [0] + base[11 + 5 * k:] for k in range(6)]
    perm = list(rng.permutation(len(prompts)))
    assert shared_tokens(prompts, 2, 4) == shared_tokens([prompts[i] for i in perm], 2, 4)


@pytest.fixture(scope="module")
def tiny_llama():
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add overhead on a shared CPU
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    yield LlamaForCausalLM(cfg).eval()
    torch.set_num_threads(threads)


class TinyBackend:
    """Plain reference: each prompt run whole, no cache."""

    def __init__(self, model, batch_tokens=40, max_batch_size=3):
        self.model, self.batch_tokens, self.max_batch_size = model, batch_tokens, max_batch_size
        self.tokenizer = SimpleNamespace(pad_token_id=0)

    def next_token_logprobs(self, prompts, prefix_len=0):
        import torch

        rows = []
        for p in prompts:
            with torch.inference_mode():
                logits = self.model(input_ids=torch.tensor([list(p)])).logits[0, -1]
            rows.append(torch.log_softmax(logits.float(), -1).numpy())
        return np.stack(rows)


def test_prefix_sharing_equals_full_forwards(tiny_llama):
    rng = np.random.default_rng(0)
    prefix = list(rng.integers(1, 64, 10))
    prompts = []
    for _ in range(3):
        orig = prefix + list(rng.integers(1, 64, 30))
        prompts.append(orig)
        for k in range(5):  # masked variants: 4 tokens replaced by 2 at different places
            a = 13 + 5 * k
            prompts.append(orig[:a] + [7, 7] + orig[a + 4:])
        prompts.append(list(orig))
    prompts.append(prefix + [3, 4, 5])  # shares only the template prefix
    ref = TinyBackend(tiny_llama)
    wrapped = PrefixSharingBackend(ref, min_shared=2)
    got = wrapped.next_token_logprobs(prompts, 10)
    np.testing.assert_allclose(got, ref.next_token_logprobs(prompts), atol=1e-5)
    assert wrapped.tokens_computed == shared_tokens(prompts, 10, 2)
    assert wrapped.tokens_plain == sum(len(p) - 10 for p in prompts)
    # per sample: the original's 30 tokens, its copy none, the variants their tails from the
    # masked position: 25 + 20 + 15 + 10 + 5; plus the 3 tokens of the lone prompt
    assert wrapped.tokens_computed == 3 * (30 + 75) + 3
    assert wrapped.group_calls == 3


def test_prefix_sharing_through_a_monitor_keeps_the_store_key():
    backend = FakeBackend()
    assert fake_monitor(PrefixSharingBackend(backend)).key == fake_monitor(backend).key


@pytest.mark.model
@pytest.mark.usefixtures("one_thread")
def test_prefix_sharing_matches_real_backend(smol_backend):
    s = replace(BAD, request="Write add(a, b).",
                response="def add(a, b):\n    return 3\n    # done\n")
    monitor = Monitor(smol_backend, load_prompt("direct"), "verdict")
    samples = [s] + [masked_sample(s, u) for u in occlusion_units(s.response, task="code")]
    plain = monitor.score(samples)
    shared = Monitor(PrefixSharingBackend(smol_backend), load_prompt("direct"),
                     "verdict").score(samples)
    assert [v.p_raw for v in shared] == pytest.approx([v.p_raw for v in plain], abs=2e-4)


def test_units_of_a_sample_without_segments():
    empty = Sample(id="e", request="r", response="   ", label=True, category="safety",
                   task="qa", pair_id="e")
    [occ] = occlude([empty], monitor_scorer(fake_monitor()))
    assert occ.segments == () and occ.top_spans() == []
