"""Where `exactspec plan`'s prices come from: the paper's scalar (--cost), a stored profile (--profile), bare
forwards measured here, or the engine's own step costs measured live (--engine-url / --engine-profile)."""
from __future__ import annotations


def batch_sizes(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--batch-sizes must be comma-separated integers >= 1, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--batch-sizes must be comma-separated integers >= 1, got {text!r}")
    return list(dict.fromkeys(sizes))


def costs(args, sizes, target=None, draft=None, progress=None, measure=True) -> tuple[list, list[str], bool]:
    """[(batch size, cost)], notes, and whether Ctrl-C stopped the measuring. Offline without a cost: measured
    here (bare forwards), one batch size at a time; after a Ctrl-C (`measure` False), or for the batch sizes a
    Ctrl-C left unmeasured, none (acceptance only)."""
    from exactspec.deploy.costprofile import CostProfile

    lookup = bool(getattr(args, "prompt_lookup", False))
    if args.cost is not None:
        return [(b, float(args.cost)) for b in sizes or [1]], [
            f"cost: the paper's model, a step drafting gamma tokens costs gamma*{args.cost:g} + 1 target steps"], False
    if args.profile:
        prof = CostProfile.load(args.profile)
        picked = [(b, prof.cost(b)) for b in sizes or prof.batch_sizes]
        note = f"cost: profile {args.profile}" + (" (calibrated on exactspec's loop)"
                                                  if prof.metadata.get("calibrated") else " (bare forward passes)")
        if prof.metadata.get("partial"):
            note += " (a partial profile: its measuring was interrupted)"
        return [(b, cm.without_draft() if lookup else cm) for b, cm in picked], [note], False
    if target is None or not measure:
        return [(b, None) for b in sizes or [1]], [
            "no --cost or --profile: acceptance only, no gamma recommended" if target is None else
            "cost not measured (interrupted): acceptance only, no gamma recommended"], False
    measured, stopped = {}, False
    if progress is not None:
        progress.start(len(sizes or [1]), "measuring the cost per batch size (bare forward passes)")
    try:
        for b in sizes or [1]:
            measured[b] = CostProfile.measure(target, draft, batch_sizes=[b], repeats=3).cost(b)
            if progress is not None:
                progress.unit(f"batch size {b}")
    except KeyboardInterrupt:
        stopped = True
    note = "cost: measured on this machine now (bare forward passes); pass --profile from the deployment machine"
    if stopped:
        note += f"; interrupted: batch sizes {[b for b in sizes or [1] if b not in measured]} not costed"
    # A plan mixes no measured and unmeasured batch sizes: the costed ones, else none (acceptance only).
    costs = [(b, measured[b]) for b in sizes or [1] if b in measured] or [(b, None) for b in sizes or [1]]
    return costs, [note], stopped


def engine_costs(args, prompt_ids: list[list[int]], progress):
    """(profile, [(1, CostModel)], notes) from --engine-url servers (stored at --engine-profile when given), or read
    from --engine-profile (exactspec.audit.enginecosts)."""
    from exactspec.audit.enginecosts import engine_costs as measured
    from exactspec.audit.engineload import parse_loads

    return measured(args.engine_url, args.engine_profile, args.engine, prompt_ids, max_tokens=args.max_new_tokens,
                    temperature=args.temperature, loads=parse_loads(args.engine_load), progress=progress)
