"""What an interrupted benchmark keeps: the report of the timed calls finished before Ctrl-C, marked partial.

:func:`exactspec.bench.bench.run_bench` keeps, as it goes, the repeats it completed and, in the repeat under way,
copies of its records after each timed call and after each prompt batch (:func:`snapshot`). On a
KeyboardInterrupt it raises :class:`BenchInterrupted` (still a KeyboardInterrupt) carrying
:func:`partial_report`: the rows of the complete repeats when there is one (each × still the ratio within a
repeat); otherwise the repeat under way, up to its last prompt batch that every system finished, or, inside its
first batch, the systems that finished it. Every figure is computed by the same code as a full report's.
"""
from __future__ import annotations

__all__ = ["BenchInterrupted", "partial_report", "snapshot"]


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`~exactspec.bench.bench.run_bench`: still a KeyboardInterrupt, carrying ``report``, the
    report of the timed calls finished before it (marked ``"partial"``), or None when even that failed."""

    def __init__(self, report: dict | None):
        super().__init__("benchmark interrupted")
        self.report = report


def snapshot(r: int, b: int, i: int, totals: dict, cal: dict, results: dict) -> dict:
    """Copies of repeat `r`'s records after its prompt batch `b`, system `i` (what a partial report reads)."""
    return {"repeat": r, "batch": b, "system": i, "totals": {k: list(v) for k, v in totals.items()},
            "cal": cal | {"stats": {k: list(v) for k, v in cal["stats"].items()}},
            "stats": {k: list(res.stats_by_repeat.get(r, [])) for k, res in results.items()}}


def partial_report(run) -> dict:
    """The report of what `run` (run_bench's record of itself) finished, with ``"partial"``: how many timed
    calls were done and planned, and which calls the rows are made of."""
    import torch

    from exactspec.bench.benchrows import SystemResult, finish_report

    cfg, c = run.cfg, run.completed
    n_batches = len(run.batches) if run.batches is not None else None
    info = {"interrupted": True, "timed_calls_done": run.done, "timed_calls_planned": run.total,
            "repeats_done": c, "repeats_planned": cfg.repeats, "prompt_batches_planned": n_batches,
            "systems_planned": list(run.systems) or None}
    snap = run.at_call
    if c:  # complete repeats only: every × is a ratio within one repeat
        results = {n: SystemResult(n, res.times[:c], res.tokens[:c],
                                   {k: v for k, v in res.stats_by_repeat.items() if k < c})
                   for n, res in run.results.items()}
        report = finish_report(results, run.systems, run.passes[:c], cfg, run.cost_model, run.draft, run.equal,
                               run.compared, partial=True)
        info["rows_from"] = f"the {c} complete repeat{'s' if c > 1 else ''} of {cfg.repeats}: every prompt, every system"
    elif snap is not None:  # inside the first repeat
        if snap["system"] != len(run.systems) - 1 and run.at_batch is not None:
            snap = run.at_batch  # the last prompt batch every system finished
        names = list(run.systems)[: snap["system"] + 1]
        systems = {n: run.systems[n] for n in names}
        results = {n: SystemResult(n, [snap["totals"][n][0]], [snap["totals"][n][1]],
                                   {0: snap["stats"][n]} if snap["stats"][n] else {}) for n in names}
        cal = snap["cal"] | {"stats": {k: v for k, v in snap["cal"]["stats"].items() if k in systems}}
        report = finish_report(results, systems, [cal], cfg, run.cost_model, run.draft, run.equal, run.compared,
                               partial=True)
        k = snap["batch"] + 1
        info["rows_from"] = (f"the first repeat's first {f'{k} prompt batches' if k > 1 else 'prompt batch'} of "
                             f"{n_batches}"
                             + ("" if len(names) == len(run.systems) else
                                f", the {len(names)} of {len(run.systems)} systems that finished it"))
    else:  # nothing timed yet: the cost model, or the warm-up
        report = {"config": {k: v for k, v in vars(cfg).items() if k != "prompts"} | {"num_prompts": len(cfg.prompts)},
                  "threads": torch.get_num_threads(),
                  "cost_model": run.cost_model.to_dict() if run.cost_model is not None else None,
                  "rows": [], "notes": []}
        info["rows_from"] = ("nothing: interrupted before the first timed call finished ("
                             + ("warm-up" if run.systems else "measuring the cost model") + ")")
    report["partial"] = info
    return report
