"""The demo: complete held-out prompts with speculative decoding, then measure plain decoding and
the predicted speedup on the same prompts (`exactspec demo`)."""
from __future__ import annotations


def run_demo(target, draft, tokenizer, prompts: list[str], *, max_new_tokens: int = 64, temperature: float = 0.0,
             gamma: int | str = "auto", method: str = "token", seed: int = 0, on_text=None,
             eos_token_id=()) -> dict:
    """Complete each prompt with speculative decoding, then measure plain decoding and the predicted speedup.

    `on_text(prompt_index, text, kind)` is called as text arrives; kind is "prompt", "accepted", "corrected"
    or "bonus" (see `exactspec.engine.text.token_kinds`). `eos_token_id` (ids; default none) ends a completion, as a
    chat model's end-of-turn token should. Returns a summary dict: per-position acceptance, mean accepted length (with and
    without the bonus token), tokens/s of speculative and plain decoding measured here, and the speedup the
    cost model predicts from the measured acceptance.
    """
    import time

    import torch

    from exactspec.engine.baseline import target_alone_loop
    from exactspec.speed.costmodel import CostModel
    from exactspec.engine.decoding import SpeculativeGenerator
    from exactspec.pairs.featuredraft import timed_model
    from exactspec.speed.prediction import predict
    from exactspec.speed.stats import GenerationStats
    from exactspec.engine.text import styled_pieces, token_kinds

    on_text = on_text or (lambda *a: None)
    # Measured before the timed runs and handed to the generator: gamma="auto" would otherwise measure
    # it inside the first timed call.
    prompt_len = max(len(tokenizer(p)["input_ids"]) for p in prompts)
    cost = CostModel.measure(target, timed_model(draft), repeats=3, prompt_len=prompt_len)
    gen = SpeculativeGenerator(target, draft, cost_model=cost)
    greedy = temperature == 0
    # One untimed run first, as any long-lived generator would have had: gamma="auto" then starts the
    # timed prompts from the acceptance it measured, not from a neutral guess (and the kernels are warm).
    warm = tokenizer(prompts[0], return_tensors="pt")
    gen.generate(warm["input_ids"], warm["attention_mask"], max_new_tokens=max_new_tokens, do_sample=not greedy,
                 temperature=temperature, top_k=0, gamma=gamma, method=method, eos_token_id=[],
                 generator=torch.Generator().manual_seed(seed - 1))  # not seed=: later runs start warm
    runs = []
    spec_time = plain_time = 0.0
    spec_tokens = plain_tokens = 0
    texts = []
    for i, prompt in enumerate(prompts):
        enc = tokenizer(prompt, return_tensors="pt")
        on_text(i, prompt, "prompt")
        ids: list[int] = []
        kinds: list[str] = []
        t0 = time.perf_counter()
        stream = gen.stream(enc["input_ids"], enc["attention_mask"], max_new_tokens=max_new_tokens,
                            do_sample=not greedy, temperature=temperature, top_k=0, gamma=gamma,
                            method=method, eos_token_id=list(eos_token_id),
                            generator=torch.Generator().manual_seed(seed + i))  # top_k=0: as the HF run below
        for step in stream:
            for toks, fds, drafted in zip(step.tokens, step.from_draft, step.drafted):
                start = len(ids)
                ids += toks
                kinds += token_kinds(fds, drafted)
                for piece, kind in styled_pieces(tokenizer, ids, kinds, start):
                    on_text(i, piece, kind)
        spec_time += time.perf_counter() - t0
        spec_tokens += len(ids)
        texts.append(tokenizer.decode(ids))
        runs.append(stream.output.stats)
        # Plain decoding of the same number of tokens, measured on the spot with transformers' generate (a
        # model on another backend: the target alone in our loop, through the same backend).
        t0 = time.perf_counter()
        if getattr(target, "backend", None):
            plain_tokens += target_alone_loop(target, enc["input_ids"], enc["attention_mask"],
                                              max_new_tokens=len(ids), temperature=temperature,
                                              seed=seed + i).numel()
        else:
            with torch.inference_mode():
                out = target.generate(**enc, max_new_tokens=len(ids), min_new_tokens=len(ids),
                                      do_sample=not greedy, pad_token_id=tokenizer.pad_token_id,
                                      **({} if greedy else {"temperature": temperature, "top_k": 0}))
            plain_tokens += out.shape[1] - enc["input_ids"].shape[1]
        plain_time += time.perf_counter() - t0
    total = GenerationStats.merge(runs)
    spec_tps, plain_tps = spec_tokens / spec_time, plain_tokens / plain_time
    # Priced as these runs ran: a draft step and the per-step overhead from the speculative runs' own
    # statistics, plain decoding at the time per token `generate` just took (its prefill included, so a
    # call of n tokens costs n of them), and the speculative prefills: end to end, like the measurement.
    plain_token = plain_time / plain_tokens
    loop_cost = cost.calibrate(total, plain_time=plain_token)

    return {
        "texts": texts,
        "stats": total.to_dict(),
        "per_position_acceptance": total.per_position_acceptance,
        "mean_accepted_per_step": total.mean_accepted_per_step,
        "mean_tokens_per_step": total.mean_tokens_per_step,
        "speculative_tokens_per_second": spec_tps,
        "plain_tokens_per_second": plain_tps,
        "measured_speedup": spec_tps / plain_tps,
        # Tokens per completion as run: a chat model's completions end at its end-of-turn token.
        "predicted_speedup": predict(total, loop_cost, n_tokens=max(1, round(spec_tokens / len(prompts))),
                                     prefill_plain=plain_token,
                                     prefill_spec=total.prefill_time / len(prompts)),
        "predicted_speedup_forwards": predict(total, cost),
        "cost_model": cost.to_dict(),
        "calibrated_cost_model": loop_cost.to_dict(),
        "cost_ratio": cost.cost_ratio,
    }
