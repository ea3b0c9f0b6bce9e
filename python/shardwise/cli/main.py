"""The command line: ``python -m shardwise plan``, ``train``, ``simulate`` and ``models``.

    python -m shardwise plan --model vgg16 --devices 4x4          # strategy table + baselines
    python -m shardwise plan --model alexnet --devices 8 --json    # the same as one JSON document
    python -m shardwise plan --model resnet50 --save plan.json     # keep the plan (docs/plan-format.md)
    python -m shardwise plan --model vgg16 --devices machine.json  # a machine file (docs/machines.md)
    python -m shardwise train --model lenet5 --devices 4 --plan search   # train on CPU workers (docs/training.md)
    python -m shardwise simulate --model alexnet --devices 4x4 --png t.png  # simulated iteration + timeline
    python -m shardwise plan --model model.onnx --devices 8        # an ONNX file, or --model module:function
    python -m shardwise models                                     # what --model accepts, the zoo with sizes

``main(argv)`` returns the exit status instead of exiting, so tests call it
directly: 0 on success, 2 for bad input.  Errors shardwise raises on purpose
(:class:`~shardwise.errors.ShardwiseError`) and files that cannot be written are
printed as one ``error: ...`` line on stderr, never as a traceback.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
from typing import Any, Callable, Sequence, TextIO

import numpy as np

from shardwise import __version__, models
from shardwise.planning import strategies
from shardwise.machine.devices import DEVICE_PRESETS, DeviceGraph
from shardwise.models.spec import LoadedModel, listing, load_model
from shardwise.cli.budget import budget_bytes, plan_within_budget, swap_report
from shardwise.planning.search_memory import PlanDoesNotFitError
from shardwise.errors import ConfigError, SearchError, SearchWarning, ShardwiseError
from shardwise.plan import Plan
from shardwise.planning.precision import PRECISIONS
from shardwise.planning.problem import CostOptions, SYNC_MODELS
from shardwise.planning.search import ALGORITHMS, search
from shardwise.cli.report import comparison_line, memory_lines, plan_document, simulated_line

EXIT_OK = 0
EXIT_ERROR = 2  # bad input: unknown model, bad device count, unwritable file, ...
EXIT_INTERRUPTED = 130  # Ctrl-C

TRAIN_EPOCHS = 20
TRAINABLE = {"lenet5": "scikit-learn's digits, resized to 32x32"}
DIGITS = TRAINABLE["lenet5"]
MODEL_HELP = ("a zoo model (python -m shardwise models lists them), the path of an .onnx file, or module:function "
              "returning a shardwise Graph or (graph, weights)")
PLAN_NAMES = ("search", "data", "model", "owt")


class _UsageError(Exception):
    """argparse's complaint about the command line, turned into a return code."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise _UsageError(f"{self.prog}: {message}")


def _add_model_and_devices(p: argparse.ArgumentParser, default_model: str) -> None:
    """--model, --batch, --devices and --device-type, as plan and simulate take them."""
    p.add_argument("--model", default=default_model, metavar="MODEL", help=MODEL_HELP + f" (default: {default_model})")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="minibatch size (default: the model's, 512 for ImageNet models, 64 for lenet5)")
    p.add_argument("--devices", default="4x4", metavar="SPEC",
                   help="N devices on one node, NODESxPER (nodes x devices per node), or the path of a machine "
                   "file (*.json, docs/machines.md); default 4x4")
    p.add_argument("--device-type", default="P100", choices=sorted(DEVICE_PRESETS),
                   help="device preset of N and NODESxPER (default: P100; a machine file has its own)")
    p.add_argument("--precision", default="fp32", choices=tuple(PRECISIONS),
                   help="the number format the plan is costed in: fp32 (default), or mixed precision bf16 / fp16 "
                   "(2-byte activations, gradients and messages, float32 master weights and optimizer state, "
                   "the devices' tensor-core peaks for matrix products and convolutions; docs/cost-model.md). "
                   "Training stays float32")


def _load_model(args: argparse.Namespace, batch: int | None) -> LoadedModel:
    """--model (a zoo name, an ONNX file or module:function, see model_spec), its warnings printed."""
    loaded = load_model(args.model, batch)
    for note in loaded.notes:
        print(f"warning: {note}", file=sys.stderr, flush=True)
    return loaded


def _model_and_devices(args: argparse.Namespace) -> tuple[Any, DeviceGraph]:
    """The graph and the device graph the options name."""
    return _load_model(args, args.batch).graph, _machine(args.devices, args.device_type)


def is_machine_file(spec: str) -> bool:
    """Does --devices name a machine file (a path ending in .json) rather than a device count?"""
    return spec.strip().lower().endswith(".json")


def _machine(spec: str, device_type: str) -> DeviceGraph:
    """--devices: N, NODESxPER (presets of ``device_type``) or a machine file."""
    if is_machine_file(spec):
        try:
            return DeviceGraph.load(spec.strip())
        except OSError as exc:
            raise ShardwiseError(f"cannot read the machine file {spec.strip()!r}: {exc.strerror or exc}") from None
    return DeviceGraph.parse(spec.strip().lower(), device=device_type)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shardwise", description="Plan layer-wise parallel training of deep neural networks: "
                     "the per-layer strategy minimizing Eq. 1 of the cost model, compared with data, model "
                     "and OWT parallelism.")
    parser.add_argument("--version", action="version", version=f"shardwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("plan", help="search the best strategy for a model on a device graph",
                       description="Search the strategy with the fastest simulated iteration (or, with "
                       "--objective eq1, the exact optimum of the estimate Eq. 1) and compare it with data, "
                       "model and OWT parallelism.")
    _add_model_and_devices(p, "vgg16")
    p.add_argument("--algorithm", default="elimination", choices=ALGORITHMS,
                   help="elimination (the exact optimum of Eq. 1, default), exhaustive (brute force, small problems "
                   "only) or tofu (Tofu's partitioning of every op over all the devices, fewest bytes moved; "
                   "docs/tofu.md)")
    p.add_argument("--objective", default=None, choices=("simulate", "eq1"),
                   help="simulate: the fastest simulated iteration among the Eq. 1 optimum, the baselines and "
                   "their combinations (default for elimination); eq1: the exact Eq. 1 optimum")
    p.add_argument("--sync", default="parameter_server", choices=sorted(SYNC_MODELS),
                   help="parameter synchronization model, for the cost model, the simulation, the memory check "
                   "and training with the saved plan: parameter_server (each replica group's gradients summed "
                   "on its first replica, parameters sent back; the default) or ring (ring all-reduce of "
                   "gradient chunks, every replica updating its own copy) or zero (the ring's reduce-scatter, each "
                   "gradient chunk's update applied by one replica holding 1/r of the optimizer state, then an "
                   "allgather of the updated weight chunks)")
    p.add_argument("--max-evaluations", type=float, default=None, metavar="N",
                   help="elimination: min-plus steps variable elimination may take on what node and edge "
                   "elimination leave (default 1e9); exhaustive: strategies it may try (default 2e7)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="stop a large search after about S seconds with the best plan found so far "
                   "(a warning gives how far from the optimum it can be); default: no limit")
    p.add_argument("--memory-budget", type=budget_bytes, default=None, metavar="SIZE",
                   help="bytes each device may use, at most its memory ('8GB', '512MiB'); when no plan fits, "
                   "the fastest plan with activation swapping to host memory (docs/memory.md)")
    p.add_argument("--save", metavar="PATH", help="write the plan as JSON (docs/plan-format.md)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (plan, baselines, search statistics) instead of tables")
    p.add_argument("--quiet", action="store_true", help="no progress lines or notes on stderr")

    t = sub.add_parser("train", help="train a model on CPU workers, one thread per device of the plan (at most one per core)",
                       description="Train a model with a plan on N CPU workers (each device of the plan is a "
                       "worker with its own memory) and report the test accuracy.  The command line trains on "
                       "scikit-learn's bundled digits data set resized to 32x32 (pip install scikit-learn): "
                       "lenet5 of the zoo, or an .onnx file or module:function whose model takes (N, 1, 32, 32) "
                       "images and gives 10 classes.  Other zoo models and other data train from Python "
                       "with sw.Trainer.")
    t.add_argument("--model", default="lenet5", metavar="MODEL",
                   help="the model to train on the digits: lenet5 of the zoo, or an .onnx file or module:function "
                   "whose model takes (N, 1, 32, 32) images and gives 10 classes (default: lenet5)")
    t.add_argument("--devices", default="4", metavar="N",
                   help="number of CPU workers (default: 4), a machine file (*.json, docs/machines.md) whose "
                   "devices the plan is made for, each run as a CPU worker, or gpu:N: this machine's GPUs as N "
                   "logical devices (with --backend cuda)")
    t.add_argument("--backend", default="cpu", choices=("cpu", "cuda"),
                   help="cpu (threads, default) or cuda (the plan's devices on this machine's GPUs; docs/gpu.md)")
    t.add_argument("--plan", default="search", metavar="PLAN",
                   help="search (the searched plan, default), data, model, owt, or the path of a plan file "
                   "saved by `plan --device-type cpu --devices N --model lenet5 --batch B --save PATH`")
    t.add_argument("--epochs", type=int, default=TRAIN_EPOCHS, metavar="E",
                   help=f"train until E epochs are done, counting those of a resumed checkpoint "
                   f"(default: {TRAIN_EPOCHS})")
    t.add_argument("--lr", type=float, default=0.02, help="SGD learning rate (default: 0.02)")
    t.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    t.add_argument("--weight-decay", type=float, default=1e-4, help="SGD weight decay (default: 1e-4)")
    t.add_argument("--batch", type=int, default=64, metavar="N", help="minibatch size (default: 64)")
    t.add_argument("--seed", type=int, default=0,
                   help="seed of the initialization, the train/test split and the shuffling (default: 0)")
    t.add_argument("--checkpoint", metavar="PATH",
                   help="save weights and optimizer state here at the end (and when interrupted)")
    t.add_argument("--resume", action="store_true",
                   help="start from --checkpoint if that file exists (same model, batch, plan and devices)")
    t.add_argument("--quiet", action="store_true", help="no notes or search progress on stderr")

    m = sub.add_parser("simulate", help="simulate one training iteration of a plan (docs/simulator.md)",
                       description="Replay one iteration of the plan's task graph with modelled durations: the "
                                   "iteration time, bytes moved and per-device busy time beside Eq. 1's estimate, "
                                   "for the plan and the baselines; optionally the Gantt chart.")
    _add_model_and_devices(m, "alexnet")
    m.add_argument("--plan", default="search", metavar="PLAN",
                   help="search (default), data, model, owt, or the path of a plan file")
    m.add_argument("--png", metavar="PATH", help="write the plan's timeline (Gantt chart) as a PNG (needs matplotlib)")
    m.add_argument("--strategy-png", metavar="PATH", help="write the plan's strategy picture as a PNG")
    m.add_argument("--quiet", action="store_true", help="no progress lines or notes on stderr")
    sub.add_parser("info", help="version, backends built, CUDA libraries and GPUs (or why none)",
                   description="Print the version, the backends this installation has and, for CUDA, the toolkit, "
                   "driver, cuDNN, cuBLAS and NCCL versions found and the GPUs seen (or why none).")
    sub.add_parser("models", help="list what --model accepts: the zoo models with their sizes, and the other forms",
                   description="List what --model accepts: the models of the zoo at their default minibatch, an "
                   "ONNX file and module:function.")
    return parser


# ----------------------------------------------------------------- commands
def _note(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=sys.stderr, flush=True)


def _cli_spelling(text: str) -> str:
    """A search message with the options spelled as command-line flags."""
    for python, flag in (("max_evaluations", "--max-evaluations"), ("time_limit", "--time-limit"),
                         ("algorithm='exhaustive'", "--algorithm exhaustive"),
                         ("algorithm='elimination'", "--algorithm elimination")):
        text = text.replace(python, flag)
    return text


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    graph, devices = _model_and_devices(args)
    batch = graph.ops[0].shape[0]
    options = CostOptions(sync=args.sync, precision=args.precision)
    _note(args, f"shardwise: {args.model} (batch {batch}, {graph.num_parameters():,} parameters, "
                f"{len(graph)} ops) on {devices.name} ({len(devices)} devices), {args.algorithm} search")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SearchWarning)
            def run(memory: Any = True) -> Plan:
                return search(graph, devices, args.algorithm, options=options, progress=not args.quiet,
                              max_evaluations=args.max_evaluations, time_limit=args.time_limit,
                              objective=args.objective, memory=memory)

            plan, swapped = (run(), None) if args.memory_budget is None else \
                plan_within_budget(run, args.memory_budget, lambda text: _note(args, text))
    except (SearchError, ConfigError) as exc:   # name the options as this command spells them
        raise type(exc)(_cli_spelling(str(exc))) from None
    for w in caught:
        print(f"warning: {_cli_spelling(str(w.message))}", file=sys.stderr, flush=True)
    memory = memory_lines(plan, args.memory_budget) if swapped is None else {"text": "", "devices": None, "over": ""}
    swap = swap_report(plan, swapped) if swapped is not None else None
    baselines = strategies.baselines(graph, devices, options)
    if args.save:
        try:
            plan.save(args.save)
        except OSError as exc:
            raise ShardwiseError(f"cannot write the plan to {args.save!r}: {exc.strerror or exc}") from None
        _note(args, f"shardwise: plan saved to {args.save}")
    if args.json:
        doc = plan_document(plan, baselines, args.model, batch)
        doc["memory"] = memory["devices"]
        if args.memory_budget is not None:
            doc["memory_budget"] = args.memory_budget
            doc["swap"] = swap["doc"] if swap else None
        json.dump(doc, out, indent=1)
        out.write("\n")
    else:
        out.write(plan.summary(baselines) + "\n\n")
        out.write("Eq. 1: " + comparison_line(plan, baselines) + "\n")
        simulated = simulated_line(plan)
        if simulated:
            out.write(simulated + "\n")
        if memory["text"]:
            out.write(memory["text"] + "\n")
        if swap:
            out.write(swap["text"] + "\n")
    if memory["over"]:
        raise PlanDoesNotFitError("the plan does not fit: " + memory["over"])
    return EXIT_OK


def _train_plan(spec: str, graph: Any, devices: DeviceGraph, quiet: bool, options: CostOptions | None = None) -> Plan:
    """The plan named on the command line: search, a baseline (costed with ``options``), or a plan file."""
    if spec == "search":
        return search(graph, devices, progress=not quiet, options=options)
    if spec in ("data", "model", "owt"):
        return {"data": strategies.data_parallel, "model": strategies.model_parallel,
                "owt": strategies.owt}[spec](graph, devices, options)
    if os.path.isfile(spec):
        try:
            return Plan.load(spec, graph, devices)
        except OSError as exc:
            raise ShardwiseError(f"cannot read the plan file {spec!r}: {exc.strerror or exc}") from None
    if spec.lower().endswith(".json") or os.sep in spec or (os.altsep and os.altsep in spec):
        raise ShardwiseError(f"the plan file {spec!r} does not exist" +
                             (" (it is a folder)" if os.path.isdir(spec) else ""))
    raise ShardwiseError(f"unknown plan {spec!r}: use one of {', '.join(PLAN_NAMES)}, or the path of a plan file")


def _worker_count(text: str) -> int:
    try:
        n = int(text.strip())
    except ValueError:
        n = 0
    if n < 1 or str(n) != text.strip():
        raise ShardwiseError(f"--devices must be a positive number of CPU workers, got {text!r}")
    return n


class _DeferredInterrupt:
    """Ctrl-C while training: remember it and stop at the next step boundary, so the
    weights are always those after a complete step.  A second Ctrl-C interrupts at once.

    A step runs in C, so a Ctrl-C during it reaches this handler once the step is complete.
    A KeyboardInterrupt raised anyway (a second Ctrl-C, or one outside this handler) comes
    between steps, with trainer.steps counting the complete ones: :func:`_train_epochs`
    turns it into the same request (:meth:`request`)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> "_DeferredInterrupt":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._installed = True
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def request(self) -> None:
        """A Ctrl-C that came as KeyboardInterrupt out of Trainer.step."""
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


def cmd_train(args: argparse.Namespace, out: TextIO) -> int:
    from shardwise.train.trainer import SGD, Trainer  # the executor and its C kernels only when training

    zoo = args.model in models.names() or args.model in models.SMALL or args.model in models.LARGE
    if zoo and args.model not in TRAINABLE:
        raise ShardwiseError(f"{args.model} cannot be trained from the command line yet: only "
                             f"{', '.join(TRAINABLE)} of the zoo (on {DIGITS}), or an .onnx file or "
                             f"module:function whose model takes (N, 1, 32, 32) images and gives 10 classes; "
                             f"train other models from Python with sw.Trainer and your own data")
    if args.epochs < 1:
        raise ShardwiseError(f"--epochs must be at least 1, got {args.epochs}")
    if args.batch < 1:
        raise ShardwiseError(f"--batch must be at least 1, got {args.batch}")
    if args.resume and not args.checkpoint:
        raise ShardwiseError("--resume needs --checkpoint PATH")
    if args.seed < 0:
        raise ShardwiseError(f"--seed must be >= 0, got {args.seed}")
    if args.checkpoint:
        folder = os.path.dirname(os.path.abspath(args.checkpoint))
        if os.path.isdir(args.checkpoint) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise ShardwiseError(f"cannot write the checkpoint to {args.checkpoint!r}: not a file in a "
                                 f"writable folder")
    optimizer = SGD(lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    if args.devices.strip().lower().startswith("gpu:"):   # the GPUs here, as N logical devices
        if args.backend != "cuda":
            raise ShardwiseError("--devices gpu:N trains on GPUs: add --backend cuda")
        devices = DeviceGraph.local_gpus(logical=_worker_count(args.devices.strip()[4:]))
    else:
        devices = _machine(args.devices, "cpu") if is_machine_file(args.devices) else DeviceGraph.cpu(
            _worker_count(args.devices))
    loaded = _load_model(args, args.batch)
    graph = loaded.graph
    _check_digits_model(args.model, graph)
    if args.plan not in PLAN_NAMES and not os.path.isfile(args.plan):
        _train_plan(args.plan, graph, devices, True)  # the error for an unknown name, before any work
    try:
        from shardwise.train.data import load_digits
        x_train, y_train, x_test, y_test = load_digits(size=32, seed=args.seed)
    except ImportError as exc:
        raise ShardwiseError(f"training {args.model} uses the digits data set of scikit-learn: {exc}") from None
    if len(x_train) < args.batch:
        raise ShardwiseError(f"--batch {args.batch} is larger than the {len(x_train)} training samples")
    comm = _job_comm()   # under mpiexec -n N (N > 1): one rank of the job; rank 0 alone prints
    if comm is not None and comm.rank != 0:
        out, args.quiet = io.StringIO(), True
    plan = _train_plan(args.plan, graph, devices, args.quiet)
    trainer = Trainer(graph, plan, optimizer=optimizer, seed=args.seed, backend=args.backend, comm=comm)
    if loaded.weights is not None:   # an ONNX file's or a function's weights: start from them
        try:
            trainer.set_weights(loaded.weights)
        except ShardwiseError as exc:
            raise ShardwiseError(f"the weights of {args.model} do not fit its graph: {exc}") from None
    if args.resume:
        if os.path.exists(args.checkpoint):
            trainer.load_checkpoint(args.checkpoint)
            _note(args, f"shardwise: resumed from {args.checkpoint} after step {trainer.steps}")
        else:
            _note(args, f"shardwise: no checkpoint at {args.checkpoint} yet, starting from scratch")
    per_epoch = len(x_train) // args.batch
    # From here on a first Ctrl-C only asks to stop: training ends at a step boundary, and the
    # checkpoint is still written (a second Ctrl-C stops at once; the atomic save then leaves
    # the previous checkpoint as it was).
    with _DeferredInterrupt() as ctrl_c:
        _note(args, f"shardwise: training {args.model} (batch {args.batch}) with the {plan.name} plan on "
                    f"{devices.name}: {len(x_train)} training and {len(x_test)} test samples, "
                    f"{DIGITS}")
        _train_epochs(trainer, x_train, y_train, args.epochs, per_epoch, args.seed, out, ctrl_c)
        if args.checkpoint:
            try:
                trainer.save_checkpoint(args.checkpoint)
            except OSError as exc:
                raise ShardwiseError(f"cannot write the checkpoint to {args.checkpoint!r}: "
                                     f"{exc.strerror or exc}") from None
            _note(args, f"shardwise: checkpoint saved to {args.checkpoint} (step {trainer.steps})")
        interrupted = ctrl_c.requested
    if interrupted:
        print(f"interrupted after step {trainer.steps}; the weights are those of that step"
              + (f", saved to {args.checkpoint}" if args.checkpoint else ""), file=sys.stderr)
        return EXIT_INTERRUPTED
    accuracy = trainer.evaluate(x_test, y_test)
    correct = int(round(accuracy * len(x_test)))
    out.write(f"test accuracy {accuracy:.2%} ({correct}/{len(x_test)}) after {trainer.steps} steps\n")
    return EXIT_OK


def _job_comm() -> Any:
    """The job's communicator when a launcher started this process as one of several ranks
    (mpiexec -n N, N > 1: docs/distributed.md), else None."""
    from shardwise import distributed

    size, _ = distributed.launcher_size()
    if size is None or size < 2:
        return None
    return distributed.init()


def _check_digits_model(spec: str, graph: Any) -> None:
    """train --model trains on the digits: one (N, 1, 32, 32) input, a softmax over 10 classes."""
    inputs = [op.shape for op in graph.ops if op.kind == "input"]
    last = graph.ops[-1]
    if len(inputs) != 1 or inputs[0][1:] != (1, 32, 32) or last.kind != "softmax" or last.shape[1:] != (10,):
        gives = f"a {last.kind} of shape {last.shape}" if last.kind != "softmax" else f"{last.shape[1]} classes"
        raise ShardwiseError(f"{spec} cannot be trained on the digits: train takes a model of one (N, 1, 32, 32) "
                             f"input and 10 classes; this one takes {', '.join(map(str, inputs))} and gives {gives}")


def _train_epochs(trainer: Any, images: np.ndarray, labels: np.ndarray, epochs: int, per_epoch: int,
                  seed: int, out: TextIO, ctrl_c: _DeferredInterrupt) -> None:
    """Train from the trainer's step count up to ``epochs`` epochs, or until Ctrl-C
    (``ctrl_c.requested``), which stops at a step boundary.

    Epoch ``e`` visits the samples in the order ``default_rng([seed, e]).permutation``,
    so a run resumed from a checkpoint (even one saved in the middle of an epoch)
    sees the same minibatches as a run that never stopped."""
    n = trainer.input.shape[0]
    first_epoch, offset = divmod(trainer.steps, per_epoch)
    if first_epoch >= epochs:
        out.write(f"already trained for {first_epoch} epochs ({trainer.steps} steps); nothing to do\n")
        return
    for epoch in range(first_epoch, epochs):
        if ctrl_c.requested:  # Ctrl-C before this epoch's first step
            return
        order = np.random.default_rng([seed, epoch]).permutation(len(images))
        total, losses, start, first_step = 0.0, 0, time.perf_counter(), trainer.steps
        for b in range(offset, per_epoch):
            idx = order[b * n:(b + 1) * n]
            try:
                total += trainer.step(images[idx], labels[idx])
                losses += 1
            except KeyboardInterrupt:
                # raised before the step began or once it was complete (it runs in C):
                # trainer.steps counts the complete steps, the weights are theirs
                ctrl_c.request()
            if ctrl_c.requested:
                break
        offset = 0
        count = trainer.steps - first_step
        seconds = time.perf_counter() - start
        rate = count * n / seconds if seconds > 0 else math.inf
        partial = "" if count == per_epoch and not ctrl_c.requested else f" ({count} of {per_epoch} steps)"
        out.write(f"epoch {epoch + 1}/{epochs}  loss {total / max(losses, 1):.4f}  {rate:8.1f} images/s"
                  f"{partial}\n")
        out.flush()
        if ctrl_c.requested:
            return


def cmd_simulate(args: argparse.Namespace, out: TextIO) -> int:
    from shardwise.iteration.simulate import MemoryOverflow, simulate

    graph, devices = _model_and_devices(args)
    _note(args, f"shardwise: simulating {args.model} (batch {graph.ops[0].shape[0]}) on {devices.name} "
                f"({len(devices)} devices), plan {args.plan}")
    options = CostOptions(precision=args.precision)
    plan = _train_plan(args.plan, graph, devices, args.quiet, options)
    if plan.options.precision != args.precision:   # a plan file keeps the precision it was costed in
        _note(args, f"shardwise: the plan file is costed in {plan.options.precision}; --precision {args.precision} "
                    f"applies to the baselines")
    rows = [(f"{plan.name} (the plan)", plan)] + [(b.name, b) for b in strategies.baselines(graph, devices, options)]
    head = f"{'plan':<22} {'simulated ms':>13} {'Eq. 1 ms':>10} {'GB moved':>10} {'busiest':>8} {'idlest':>8}"
    lines = [head, "-" * len(head)]
    result = None
    for label, p in rows:
        try:
            sim = simulate(p)
        except MemoryOverflow as exc:
            lines.append(f"{label:<22} does not fit: {exc}")
            continue
        result = sim if p is plan else result
        busy = sim.device_busy.values()
        lines.append(f"{label:<22} {sim.iteration_time * 1e3:13.2f} {p.cost * 1e3:10.2f} {sim.bytes_moved / 1e9:10.3f} "
                     f"{max(busy):8.0%} {min(busy):8.0%}")
    out.write("\n".join(lines) + "\n")
    out.write("simulated: the task graph replayed with overlap (docs/simulator.md); Eq. 1: the planner's sum of "
              "every cost; busiest/idlest: the share of the iteration the most and least used device computes\n")
    if args.png or args.strategy_png:
        if result is None:
            raise ShardwiseError("the plan does not fit in device memory: no timeline to draw")
        try:
            if args.png:
                result.plot_timeline(args.png)
                _note(args, f"shardwise: timeline written to {args.png}")
            if args.strategy_png:
                plan.plot(args.strategy_png)
                _note(args, f"shardwise: strategy picture written to {args.strategy_png}")
        except ImportError as exc:
            raise ShardwiseError(str(exc)) from None
        except OSError as exc:
            raise ShardwiseError(f"cannot write the picture: {exc.strerror or exc}") from None
    return EXIT_OK


def cmd_models(args: argparse.Namespace, out: TextIO) -> int:
    out.write(listing())
    return EXIT_OK


def cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    from shardwise.cli.info import info_text

    out.write(info_text())
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
    "plan": cmd_plan, "train": cmd_train, "simulate": cmd_simulate, "models": cmd_models, "info": cmd_info}


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
        return EXIT_INTERRUPTED
