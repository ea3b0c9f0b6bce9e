"""The command line: ``python -m shardwise plan`` and ``python -m shardwise models``.

    python -m shardwise plan --model vgg16 --devices 4x4          # strategy table + baselines
    python -m shardwise plan --model alexnet --devices 8 --json    # the same as one JSON document
    python -m shardwise plan --model resnet50 --save plan.json     # keep the plan (docs/plan-format.md)
    python -m shardwise models                                     # the zoo, with parameter counts

``main(argv)`` returns the exit status instead of exiting, so tests call it
directly: 0 on success, 2 for bad input.  Errors shardwise raises on purpose
(:class:`~shardwise.errors.ShardwiseError`) and files that cannot be written are
printed as one ``error: ...`` line on stderr, never as a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Sequence, TextIO

from . import __version__, models, strategies
from .devices import DEVICE_PRESETS, DeviceGraph
from .errors import ShardwiseError
from .plan import Plan
from .problem import CostOptions, SYNC_MODELS
from .search import ALGORITHMS, search

EXIT_OK = 0
EXIT_ERROR = 2  # bad input: unknown model, bad device count, unwritable file, ...


class _UsageError(Exception):
    """argparse's complaint about the command line, turned into a return code."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise _UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shardwise", description="Plan layer-wise parallel training of deep neural networks: "
                     "the per-layer strategy minimizing Eq. 1 of the cost model, compared with data, model "
                     "and OWT parallelism.")
    parser.add_argument("--version", action="version", version=f"shardwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("plan", help="search the best strategy for a zoo model on a device graph",
                       description="Search the strategy minimizing the estimated time per iteration (Eq. 1) "
                       "and compare it with data, model and OWT parallelism.")
    p.add_argument("--model", default="vgg16", metavar="NAME",
                   help=f"zoo model, one of: {', '.join(models.names())} (default: vgg16)")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="minibatch size (default: the model's, 512 for ImageNet models, 64 for lenet5)")
    p.add_argument("--devices", default="4x4", metavar="SPEC",
                   help="N devices on one node, or NODESxPER (nodes x devices per node); default 4x4")
    p.add_argument("--device-type", default="P100", choices=sorted(DEVICE_PRESETS),
                   help="device preset (default: P100)")
    p.add_argument("--algorithm", default="elimination", choices=ALGORITHMS,
                   help="elimination (exact, default) or exhaustive (brute force, small problems only)")
    p.add_argument("--sync", default="parameter_server", choices=sorted(SYNC_MODELS),
                   help="parameter synchronization model (default: parameter_server)")
    p.add_argument("--save", metavar="PATH", help="write the plan as JSON (docs/plan-format.md)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (plan, baselines, search statistics) instead of tables")
    p.add_argument("--quiet", action="store_true", help="no progress lines or notes on stderr")

    sub.add_parser("models", help="list the zoo models with their parameter counts",
                   description="List the models of the zoo at their default minibatch.")
    return parser


# ----------------------------------------------------------------- helpers
def _finite(value: Any) -> Any:
    """JSON has no inf/NaN: replace them by null, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def comparison(plan: Plan, baselines: Sequence[Plan]) -> dict[str, Any]:
    """How the searched plan compares with the best baseline and with data parallelism."""
    best = min(baselines, key=lambda b: b.cost)
    data = next(b for b in baselines if b.name == "data")
    speedup = best.cost / plan.cost if plan.cost > 0 else math.inf
    if plan.bytes_moved > 0:
        fewer = data.bytes_moved / plan.bytes_moved
    else:
        fewer = math.inf if data.bytes_moved > 0 else 1.0
    return {"best_baseline": best.name, "best_baseline_cost": best.cost, "speedup_vs_best_baseline": speedup,
            "data_parallel_bytes_moved": data.bytes_moved, "bytes_fewer_than_data_parallel": fewer}


def comparison_line(plan: Plan, baselines: Sequence[Plan]) -> str:
    c = comparison(plan, baselines)
    if plan.bytes_moved > 0:
        ratio = f"{c['bytes_fewer_than_data_parallel']:.2f}x fewer bytes than data parallelism"
    elif c["data_parallel_bytes_moved"] > 0:
        ratio = "no bytes at all, unlike data parallelism"
    else:
        ratio = "as few bytes as data parallelism (none)"
    return (f"searched plan: {c['speedup_vs_best_baseline']:.2f}x faster than the best baseline "
            f"({c['best_baseline']}, {c['best_baseline_cost'] * 1e3:.3f} ms/iter) and moves {ratio} "
            f"({plan.bytes_moved / 1e6:.2f} MB vs {c['data_parallel_bytes_moved'] / 1e6:.2f} MB per iteration)")


def plan_document(plan: Plan, baselines: Sequence[Plan], model: str, batch: int) -> dict[str, Any]:
    """What ``plan --json`` prints: ``plan.to_dict()`` plus layers, baselines, comparison, search stats."""
    doc = plan.to_dict()
    doc["model"] = {"name": model, "batch": batch, "parameters": plan.graph.num_parameters()}
    doc["layers"] = [row.as_dict() for row in plan.layer_costs()]
    doc["baselines"] = [{"name": b.name, "cost": b.cost, "breakdown": b.breakdown, "bytes_moved": b.bytes_moved}
                        for b in baselines]
    doc["comparison"] = comparison(plan, baselines)
    doc["search_stats"] = plan.search_stats
    return _finite(doc)


# ----------------------------------------------------------------- commands
def _note(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=sys.stderr, flush=True)


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    kwargs = {} if args.batch is None else {"batch": args.batch}
    graph = models.get(args.model, **kwargs)
    batch = graph.ops[0].shape[0]
    devices = DeviceGraph.parse(args.devices.strip().lower(), device=args.device_type)
    options = CostOptions(sync=args.sync)
    _note(args, f"shardwise: {args.model} (batch {batch}, {graph.num_parameters():,} parameters, "
                f"{len(graph)} ops) on {devices.name} ({len(devices)} devices), {args.algorithm} search")
    plan = search(graph, devices, args.algorithm, options=options, progress=not args.quiet)
    baselines = strategies.baselines(graph, devices, options)
    if args.save:
        try:
            plan.save(args.save)
        except OSError as exc:
            raise ShardwiseError(f"cannot write the plan to {args.save!r}: {exc.strerror or exc}") from None
        _note(args, f"shardwise: plan saved to {args.save}")
    if args.json:
        json.dump(plan_document(plan, baselines, args.model, batch), out, indent=1)
        out.write("\n")
    else:
        out.write(plan.summary(baselines) + "\n\n")
        out.write(comparison_line(plan, baselines) + "\n")
    return EXIT_OK


def cmd_models(args: argparse.Namespace, out: TextIO) -> int:
    head = f"{'model':<14} {'parameters':>13} {'ops':>5} {'batch':>6}  {'input':<20} {'GFLOP fwd':>10}"
    lines = [head, "-" * len(head)]
    for name in models.names():
        g = models.get(name)
        inp = g.ops[0].shape
        lines.append(f"{name:<14} {g.num_parameters():>13,} {len(g):>5} {inp[0]:>6}  "
                     f"{str(tuple(inp[1:])):<20} {g.flops() / 1e9:>10.1f}")
    out.write("\n".join(lines) + "\n")
    return EXIT_OK


COMMANDS = {"plan": cmd_plan, "models": cmd_models}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # --help and --version exit through argparse
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return COMMANDS[args.command](args, sys.stdout)
    except ShardwiseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
