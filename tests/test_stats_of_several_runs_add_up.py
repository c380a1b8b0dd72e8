"""GenerationStats.merge adds the counts of several runs, position by position and length by length."""
import torch

from exactspec.speed.stats import GenerationStats


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


def _engine_run(drafter_kind: str, gamma, tree=None):
    from _spec_models import left_padded, noisy_copy, tiny_lm
    from exactspec import CostModel, SpeculativeGenerator

    target = tiny_lm("llama", seed=0)
    cost = CostModel(t_draft=0.001, target_times={1: 0.010, 16: 0.012})
    if drafter_kind == "prompt_lookup":
        gen = SpeculativeGenerator(target, drafter="prompt_lookup", cost_model=cost)
    else:
        gen = SpeculativeGenerator(target, noisy_copy(target, 0.3), cost_model=cost)
    ids, mask = left_padded([[5, 6, 7, 5, 6, 7, 5, 6], [9, 3], [1, 2, 3, 4, 1, 2]])
    return gen.generate(ids, mask, max_new_tokens=24, gamma=gamma, tree=tree, seed=1, do_sample=True,
                        eos_token_id=[7]).stats


def test_per_row_counts_and_widths_add_up_to_the_runs_totals():
    """Each step's per-row (drafted, accepted) pairs sum to the run's counts; the widths histogram counts
    every target call and every position fed; row_tokens are the tokens each row emitted (ragged: EOS ends
    rows early)."""
    for kind, gamma, tree in (("draft", "auto", None), ("draft", 3, None), ("prompt_lookup", "auto", None),
                              ("draft", None, (2, 1))):
        st = _engine_run(kind, gamma if tree is None else "auto", tree)
        assert sum(st.width_counts) == st.target_calls
        assert sum(w * c for w, c in enumerate(st.width_counts)) == st.target_positions
        assert sum(st.row_tokens) == st.new_tokens and len(st.row_tokens) == 3
        assert len(st.step_rows) == st.target_calls
        pooled = GenerationStats()
        for rows in st.step_rows:
            assert len({r for r, _, _ in rows}) == len(rows) and all(0 <= r < 3 for r, _, _ in rows)
            for _, k, a in rows:
                pooled.record_step(torch.tensor([k]), torch.tensor([a]))
        assert pooled.length_counts == st.length_counts[:len(pooled.length_counts)]
        assert sum(pooled.length_counts) == st.row_steps and pooled.accepted_tokens == st.accepted_tokens
