"""Agreement of calimon's scoring pass with a plain forward pass, on the device and dtype of the
run: humaneval-pairs' real lengths (up to 8 prompts), calimon's verdict log-probs with its
defaults (shared prefix without a mask, the batch packed) against ``model(input_ids)`` of each
whole prompt, one at a time. The issue's tolerances: 1e-5 in fp32 (the tiny CPU run), 1e-2 in
bf16 (a GPU run)."""

from __future__ import annotations

from gpu_plan import real_lengths


def agreement(bench) -> dict:
    """{"prompts", "max_abs_dp" (any next-token probability), "max_abs_dlogp_top10" (over
    the plain pass's 10 most likely tokens)} or {"error": why}."""
    if bench.calimon is None:
        return {"error": f"calimon not importable ({bench.calimon_error})"}
    torch, args = bench.torch, bench.args
    n = min(8, max(args.real_samples))
    prompts = bench.prompts(real_lengths(n, args.real_unit, args.seed, args.prefix_tokens))
    backend = bench.calimon.Backend.from_loaded(bench.calimon.model_ref(args), bench.model,
                                                _Pad(), max_batch_size=n,
                                                batch_tokens=n * max(map(len, prompts)))
    got = torch.as_tensor(backend.next_token_logprobs(prompts, prefix_len=args.prefix_tokens))
    with torch.inference_mode():
        ref = torch.stack([torch.log_softmax(bench.model(
            input_ids=torch.tensor([p], device=args.device), logits_to_keep=1).logits[0, -1]
            .float(), -1).cpu() for p in prompts])
    top = ref.topk(10, dim=-1).indices
    return {"prompts": n, "max_abs_dp": float((got.exp() - ref.exp()).abs().max()),
            "max_abs_dlogp_top10": float((got.gather(1, top) - ref.gather(1, top)).abs().max())}


def agreement_line(result: dict, dtype: str) -> str:
    """The report's line for `agreement`'s result."""
    if "error" in result:
        return f"Agreement with a plain pass: not measured ({result['error']})."
    tol = 1e-5 if dtype == "float32" else 1e-2
    ok = "within" if result["max_abs_dp"] <= tol else "NOT within"
    return (f"Agreement with a plain pass ({result['prompts']} real-length prompts, calimon's "
            f"defaults: prefix without a mask, packed): max |dp| {result['max_abs_dp']:.2e} "
            f"({ok} {tol:g} for {dtype}), max |d log p| over the plain pass's top 10 tokens "
            f"{result['max_abs_dlogp_top10']:.2e}.")


class _Pad:
    """The tokenizer attribute the backend reads here: the padding id."""

    pad_token_id = 0
