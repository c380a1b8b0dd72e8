"""The baseline every speedup is a ratio to: the target decoding alone, one token per call, through the
same forward and sampling path as the speculative loop."""
from __future__ import annotations

import time

import torch

from exactspec.verification.sampling import probs_from_logits, sample_from_probs

__all__ = ["target_alone_loop"]


@torch.inference_mode()
def target_alone_loop(target, input_ids, attention_mask, *, max_new_tokens, temperature, seed, timings=None,
                      top_p: float = 1.0):
    """Plain autoregressive decoding with exactspec's own sampling path and the engine's target forward.

    The baseline the cost model assumes (one target call of one token per new token), to separate the
    speedup of speculation from the overhead of our Python loop. The target runs as the speculative loop
    runs it (:class:`exactspec.backends.cache.SlotCache` with the target's lean forward, logits equal to
    transformers' forward), so the ratio holds the speculation alone. `timings` (a dict), if given,
    receives the seconds of the prefill under "prefill".
    """
    from exactspec.backends.seam import open_session

    gen = torch.Generator().manual_seed(seed)
    cache = open_session(target, input_ids.shape[0], target=True)
    t0 = time.perf_counter()
    # logits of the last position only, as generate() and the speculative engine's prefill
    logits = cache.forward(input_ids, attention_mask.bool(), logits_to_keep=1)
    if timings is not None:
        timings["prefill"] = time.perf_counter() - t0
    tokens = []
    for step in range(max_new_tokens):
        if temperature == 0:  # the argmax (lowest id among ties) as the engine's greedy plain step takes it: the
            nxt = logits[:, -1].argmax(-1)  # one-hot law and its checks cost ~6% of a llama.cpp token (r10)
        else:
            nxt = sample_from_probs(probs_from_logits(logits[:, -1], temperature=temperature, top_p=top_p), gen)
        tokens.append(nxt)
        if step == max_new_tokens - 1:  # the last token needs no forward pass
            break
        logits = cache.forward(nxt[:, None], torch.ones_like(nxt[:, None], dtype=torch.bool))
    return torch.stack(tokens, 1)
