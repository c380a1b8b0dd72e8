"""`exactspec profile`: measure the cost model per batch size on this machine and write it to JSON.

Run it on the machine you will deploy on; `exactspec plan --profile FILE` prices every gamma with it.
"""
from __future__ import annotations

from exactspec.cli import check_out_file, pair


def register(subparsers) -> None:
    p = subparsers.add_parser("profile", help="measure T_target(k) and t_draft per batch size, write JSON",
                              description=__doc__)
    p.add_argument("--target", metavar="PATH", help="target model (local path or local HF cache)")
    p.add_argument("--pair", type=pair, metavar="NAME", help="a shipped pair instead of --target/--draft")
    p.add_argument("--draft", metavar="PATH", help="draft model (omit for prompt lookup: a free draft step)")
    p.add_argument("--batch-sizes", default="1", metavar="1,8,32", help="batch sizes to profile (default 1)")
    p.add_argument("--prompt-len", type=int, default=64, help="context length of the timed calls (default 64)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (median; default 5)")
    p.add_argument("--calibrate", action="store_true",
                   help="also price exactspec's own loop (per-step overhead, in-loop draft steps): for serving "
                        "with exactspec; vLLM and SGLang have their own overheads")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the profile JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch
    from transformers.utils import logging as hf_logging

    from exactspec.cli.plan import _batch_sizes, _load, pair_paths
    from exactspec.cli.progress import Progress
    from exactspec.deploy.costprofile import CostProfile

    if args.pair and (args.target or args.draft):
        raise ValueError("--pair replaces --target/--draft; give one or the other")
    if not args.pair and not args.target:
        raise ValueError("give --target PATH [--draft PATH], or --pair demo")
    if args.prompt_len < 1 or args.repeats < 1:
        raise ValueError("--prompt-len and --repeats must be >= 1")
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    sizes = _batch_sizes(args.batch_sizes)
    check_out_file("--out", args.out)
    target_path, draft_path = pair_paths(args.pair) if args.pair else (args.target, args.draft)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    measured, stopped = {}, False
    with Progress("profile", log=_log_path(args.out)) as progress:
        progress.phase("loading the models")
        if args.pair:
            target, draft, _ = _load(target_path, draft_path, args.pair)
            target, draft = target.to(args.device), draft.to(args.device)
        else:
            from exactspec.pairs.stdlib import load_pair

            target, draft, _ = load_pair(target_path, draft_path, device=args.device)
        progress.start(len(sizes), "measuring per batch size" + (" (bare forwards, then exactspec's loop)"
                                                                  if args.calibrate else " (bare forward passes)"))
        try:
            for b in sizes:  # one at a time (each seeded as one call over all of them seeds it): Ctrl-C keeps those done
                part = CostProfile.measure(target, draft, batch_sizes=[b], prompt_len=args.prompt_len,
                                           repeats=args.repeats, calibrate=args.calibrate)
                measured[b], meta = part.cost(b), part.metadata
                progress.unit(f"batch size {b}")
        except KeyboardInterrupt:
            stopped = True
        progress.stop_bar()
        if not measured:
            from exactspec.cli.progress import interrupted

            return interrupted("profile", f"no batch size measured yet (of {sizes}); nothing written", progress)
        prof = CostProfile(measured, meta)
        prof.metadata.update(target=target_path, draft=draft_path, device=args.device,
                             threads=torch.get_num_threads())
        if stopped:
            prof.metadata["partial"] = {"interrupted": True, "batch_sizes_done": sorted(measured),
                                        "batch_sizes_planned": sizes}
        prof.save(args.out)
        for b, cm in prof.by_batch_size.items():
            print(f"batch {b}: t_draft {1e3 * cm.t_draft:.3f} ms, T_target(1) {1e3 * cm.t_target(1):.3f} ms, "
                  f"T_target(5) {1e3 * cm.t_target(5):.3f} ms, c = {cm.cost_ratio:.3f}"
                  + (f", overhead {1e3 * cm.t_overhead:.3f} ms/step" if cm.t_overhead else ""), flush=True)
        if stopped:
            from exactspec.cli.progress import interrupted

            return interrupted("profile", f"wrote the batch sizes measured ({sorted(measured)} of {sizes}; marked "
                                          f"partial) to {args.out}", progress)
    print(f"wrote {args.out}")
    return 0


def _log_path(out: str) -> str:
    """The progress log beside the profile: profile.json -> profile.log."""
    import pathlib

    path = pathlib.Path(out)
    return str(path.with_suffix(".log") if path.suffix == ".json" else path.with_name(path.name + ".log"))
