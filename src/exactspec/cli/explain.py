"""`exactspec explain`: verify one position by hand (acceptance, residual, and the exactness check)."""
from __future__ import annotations

import json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "explain",
        help="manual verification of one position: acceptance, residual, exactness check",
        description="Show, for a target distribution p and a draft distribution q, the acceptance "
                    "probabilities min(1, p/q), the residual max(0, p - q), the acceptance rate, and "
                    "for every token that P(output = x) = p(x).",
    )
    p.add_argument("--target", required=True, metavar="P1,P2,...", help="target distribution p")
    p.add_argument("--draft", required=True, metavar="Q1,Q2,...", help="draft distribution q")
    p.add_argument("--labels", metavar="A,B,...", help="token labels (default 0,1,...)")
    p.add_argument("--normalize", action="store_true", help="rescale --target/--draft to sum to 1")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=run)


def run(args) -> int:
    from exactspec.verification.explain import explain_position, parse_distribution, render

    target = parse_distribution(args.target, "--target", args.normalize)
    draft = parse_distribution(args.draft, "--draft", args.normalize)
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    result = explain_position(target, draft, labels)
    if args.json:
        print(json.dumps(result))
    else:
        render(result)
    return 0
