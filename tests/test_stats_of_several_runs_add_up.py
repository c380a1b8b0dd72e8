"""GenerationStats.merge adds the counts of several runs, position by position and length by length."""
import torch

from exactspec.stats import GenerationStats


def _run(lengths, accepted, new_tokens, t):
    s = GenerationStats()
    s.record_step(torch.tensor(lengths), torch.tensor(accepted))
    s.new_tokens, s.total_time, s.gamma_history = new_tokens, t, [max(lengths)]
    return s


def test_merge_adds_counts_and_keeps_derived_rates_consistent():
    a = _run([4, 2], [4, 1], new_tokens=7, t=0.5)  # row 0 all kept (+bonus), row 1 one kept (+corrected)
    b = _run([3], [0], new_tokens=1, t=0.25)
    m = GenerationStats.merge([a, b])
    assert (m.target_calls, m.row_steps, m.drafted_tokens, m.accepted_tokens) == (2, 3, 9, 5)
    assert m.position_drafted == [3, 2, 1, 1] and m.position_accepted == [2, 1, 1, 1]
    assert m.length_counts == [0, 0, 1, 1, 1]
    assert m.gamma_history == [4, 3]
    assert m.new_tokens == 8 and m.total_time == 0.75
    assert m.mean_accepted_per_step == 5 / 3 and m.mean_tokens_per_step == 8 / 3
    assert GenerationStats.merge([]) == GenerationStats()
