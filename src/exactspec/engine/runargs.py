"""A run's arguments, checked and resolved before it starts (SpeculativeGenerator.stream calls run_args).

Every bad input gets a ValueError or TypeError that names the argument, before any forward pass; the
resolved settings (sampling spec with the run's seeded generator, EOS ids, pad id) are frozen for the run.
"""
from __future__ import annotations

import torch

from exactspec.backends.cache import max_positions
from exactspec.backends.seam import embed_size, vocab_size
from exactspec.verification.checks import (check_choice, check_generator, check_int, check_seed, check_tensor,
                                            check_token_ids)
from exactspec.engine.hfconfig import SamplingConfig, SamplingSpec
from exactspec.verification.rulechecks import METHODS

__all__ = ["run_args"]


def _check_causal_lm(model, name: str) -> None:
    from transformers import PreTrainedModel

    from exactspec.backends.seam import is_backend_model

    if is_backend_model(model):  # a model of another backend (a GGUF file run by llama.cpp)
        return

    ok = (isinstance(model, PreTrainedModel) and hasattr(model, "generate")
          and not getattr(model.config, "is_encoder_decoder", False)
          and model.get_output_embeddings() is not None)
    if not ok:
        raise TypeError(f"{name} must be a transformers causal LM (e.g. from AutoModelForCausalLM), "
                        f"got {type(model).__name__}")
    if getattr(model.config.get_text_config(), "is_decoder", True) is False:  # BERT-style LM heads
        raise ValueError(f"{name} ({type(model).__name__}) has config.is_decoder=False: it attends in both "
                         "directions, so it is not a causal LM (build it with is_decoder=True)")


def _as_id_list(x) -> list[int]:
    if x is None:
        return []
    if isinstance(x, torch.Tensor):
        return [int(v) for v in x.flatten().tolist()]
    if isinstance(x, int):
        return [x]
    return [int(v) for v in x]


def run_args(gen, input_ids, attention_mask, max_new_tokens, sampling, generation_config, gamma,
             method, eos_token_id, pad_token_id, seed, generator=None) -> dict:
    """Check one run's arguments (ValueError / TypeError naming the argument) and resolve them for
    generator `gen`: ids and mask on the target's device, the sampling spec (transformers' resolution of
    the generation config, with the run's seeded generator), the EOS ids and the pad id."""
    check_tensor("input_ids", input_ids, kind="int", dims=2)
    if input_ids.shape[0] < 1 or input_ids.shape[1] < 1 or input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must be an int64/int32 tensor of shape [batch >= 1, prompt_len >= 1], "
                         f"got {input_ids.dtype} {tuple(input_ids.shape)}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    check_tensor("attention_mask", attention_mask)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
                         f"got {tuple(attention_mask.shape)}")
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (real token)")
    n_embed = embed_size(gen.target)
    real = input_ids[attention_mask.bool()]
    if real.numel() and (int(real.min()) < 0 or int(real.max()) >= n_embed):
        raise ValueError(f"input_ids: token ids must lie in [0, {n_embed}) (the target's vocabulary), "
                         f"got ids in [{int(real.min())}, {int(real.max())}]")
    if not bool((attention_mask[:, -1] != 0).all()):
        raise ValueError("attention_mask: prompts must be left-padded (last column real for every row)")
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, min=0)
    # Sampling settings (None = from the generation_config) are validated by SamplingConfig below.
    check_choice("method", method, METHODS)
    if not (isinstance(gamma, str) and gamma == "auto"):
        try:
            gamma = check_int("gamma", gamma, min=1)
        except ValueError as exc:  # (ArgumentTypeError is one too) name the other valid value
            raise type(exc)(f"{exc} (or 'auto')") from None
    seed = check_seed("seed", seed)
    if generator is not None:
        if seed is not None:
            raise ValueError("pass seed or generator, not both (seed reproduces; generator draws from yours)")
        check_generator("generator", generator)
    vocab = vocab_size(gen.target)
    if eos_token_id is not None:
        check_token_ids("eos_token_id", eos_token_id, vocab)
    if pad_token_id is not None:
        check_int("pad_token_id", pad_token_id, min=0, max=vocab - 1)
    prompt_len = int(attention_mask.sum(1).max())
    models = [("target", gen.target)] + ([("draft", gen.draft)] if gen.draft is not None else [])
    for name, model in models:
        limit = max_positions(model)
        if limit is not None and prompt_len + max_new_tokens > limit:
            raise ValueError(
                f"input_ids: prompt of {prompt_len} tokens + max_new_tokens={max_new_tokens} exceeds "
                f"the {name}'s context of {limit} positions")
    gc = gen.target.generation_config
    eos = _as_id_list(gc.eos_token_id if eos_token_id is None else eos_token_id)
    if pad_token_id is None:
        pad_token_id = gc.pad_token_id if gc.pad_token_id is not None else (eos[0] if eos else 0)
    device = gen.target.device
    if generator is not None:
        rng = check_generator("generator", generator, device)
    else:
        rng = torch.Generator(device=device)
        rng.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,))))
    # One frozen, validated config resolved like target.generate(); the spec adds the run's generator
    # and transformers' processors (built and checked now, not mid-stream).
    sampling = {**sampling, "eos_token_id": eos if eos_token_id is not None else None}
    if method == "greedy":
        sampling["do_sample"] = False
    config = SamplingConfig.from_model(gen.target, generation_config, **sampling)
    spec = SamplingSpec(config, rng, vocab, gen.target,
                        max_new_tokens)
    return dict(ids=input_ids.long().to(device), mask=attention_mask.long().to(device),
                max_new=max_new_tokens, spec=spec, gamma=gamma, method=method,
                eos=torch.tensor(eos, dtype=torch.long, device=device), pad=int(pad_token_id))
