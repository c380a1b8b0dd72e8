"""CostModel interpolates/extrapolates its table as documented, round-trips through dict and JSON, and
`measure` times real HF forward passes with a rolled-back KV cache (tiny random-weight Llamas, no downloads)."""
import json

import pytest
import torch

from exactspec import CostModel


def test_interpolation_and_extrapolation():
    cm = CostModel(0.01, {1: 1.0, 3: 2.0, 5: 2.5})
    assert cm.t_target(1) == 1.0 and cm.t_target(2) == 1.5 and cm.t_target(4) == 2.25
    assert cm.t_target(7) == pytest.approx(3.0)  # slope of the last two points: 0.25 per token
    assert cm.cost_ratio == 0.01
    assert cm.step_time(3) == pytest.approx(3 * 0.01 + 2.25)
    noisy = CostModel(0.01, {1: 1.0, 16: 2.0, 17: 1.9})  # measurement noise: T(17) < T(16)
    assert noisy.t_target(40) == pytest.approx(1.9)  # never extrapolate to cheaper verification
    below = CostModel(0.01, {2: 1.2, 4: 1.4})
    assert below.t_target(1) == 1.2  # held constant below the table
    with pytest.raises(ValueError, match="k"):
        cm.t_target(0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(t_draft=-1, target_times={1: 1.0}), "t_draft"),
    (dict(t_draft=0.1, target_times={}), "target_times"),
    (dict(t_draft=0.1, target_times={0: 1.0}), "target_times"),
    (dict(t_draft=0.1, target_times={1: -2.0}), "target_times"),
])
def test_bad_tables(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CostModel(**kwargs)


def test_round_trip(tmp_path):
    cm = CostModel(0.003, {1: 0.01, 2: 0.012, 8: 0.02}, {"note": "x"})
    d = json.loads(json.dumps(cm.to_dict()))
    assert CostModel.from_dict(d) == cm and CostModel.from_dict(d).metadata == {"note": "x"}
    cm.save(tmp_path / "c.json")
    assert CostModel.load(tmp_path / "c.json") == cm
    with pytest.raises(ValueError, match="t_draft"):
        CostModel.from_dict({"target_times": {"1": 1.0}})


def tiny_llama(hidden, layers, seed):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


def test_measure_on_tiny_models():
    target, draft = tiny_llama(128, 4, 0), tiny_llama(32, 1, 1)
    cm = CostModel.measure(target, draft, prompt_len=16, ks=(1, 4, 32), repeats=3, warmup=1, seed=0)
    assert set(cm.target_times) == {1, 4, 32}
    assert cm.t_draft > 0 and all(t > 0 for t in cm.target_times.values())
    # "monotone enough": 32 tokens are not cheaper than a single one, beyond timer noise
    assert cm.target_times[32] > 0.7 * cm.target_times[1]
    md = cm.metadata
    assert md["batch_size"] == 1 and md["prompt_len"] == 16 and md["torch_threads"] >= 1
    assert md["target"]["params"] > md["draft"]["params"] > 0
    assert CostModel.from_dict(json.loads(json.dumps(cm.to_dict()))) == cm


def test_measure_rolls_the_cache_back():
    # After each timed call the cache is cropped by k, so repeats see the same context: the logits of
    # the timed k-token call are the same in every repeat (checked via a wrapper that records them).
    target = tiny_llama(64, 2, 2)
    seen = []

    class Spy(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m, self.config = m, m.config

        def forward(self, **kw):
            out = self.m(**kw)
            if kw.get("cache") is not None:
                seen.append((kw["cache"].get_seq_length(), out.logits[0, -1].clone()))
            return out

    CostModel.measure(Spy(target), target, prompt_len=8, ks=(1, 3), repeats=2, warmup=1)
    lengths = {n for n, _ in seen}
    assert lengths == {8 + 1, 8 + 3}  # cache length after the call: prompt + k, never growing
    for n in lengths:
        logits = [l for m, l in seen if m == n]
        for other in logits[1:]:
            torch.testing.assert_close(other, logits[0])


def test_without_draft_keeps_target_times_and_frees_the_draft():
    from exactspec import CostModel

    cm = CostModel(0.002, {1: 0.01, 5: 0.015}, {"note": "x"})
    free = cm.without_draft()
    assert free.t_draft == 0.0 and free.target_times == cm.target_times and free.metadata == cm.metadata
    assert free.step_time(4) == cm.t_target(5)
