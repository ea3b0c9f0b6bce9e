"""One op x backend conformance harness (ggml's test-backend-ops, tinygrad's helper_test_op).

Every op kind of the op table (``_core.OP_KINDS``) has one or more :class:`Case` rows in
:data:`CASES`.  A case builds a minimal graph around the op under test (named ``"op"``):

    x (input) + p0 (parameter)  ->  op(..., p1, p2, ...)  ->  head  ->  softmax cross-entropy

* the op's data inputs are parameter ops (the first one added to the graph's input ``x``), so
  the gradient with respect to each data input is a parameter gradient, which both the runtime
  and :func:`shardwise.reference.loss_and_grads` report;
* the head turns the op's output into a loss with a known reference gradient: (N, K) outputs
  feed ``linear -> softmax``, others ``flatten -> linear -> softmax`` (cross-entropy against N
  labels); the upstream gradient the op receives is therefore general (not all ones) and is
  the reference's too.

:func:`run_backend` trains one step (SGD with lr 0: nothing changes) of a plan through the real
runtime (``sw.Trainer``'s task graph and :class:`~shardwise.train.runtime.NativeExecutor`), built
with ``reuse=False`` so every buffer keeps its bytes after the step: it reads back every op's
output (``activation`` buffers, assembled from the workers' boxes) and every parameter's summed
gradient (the ``param_grad`` each ``update`` task reads).  :func:`check_case` compares them with
the NumPy reference in float64 and with central finite differences of the runtime's own forward
loss, and on a mismatch fails with :func:`check_tensor`'s report (llm.c's ``check_tensor``: the
first few (index, got, expected) and the worst absolute and relative difference).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import shardwise as sw
from shardwise import _core
from shardwise import reference as ref
from shardwise.train.init import init_params
from shardwise.train.runtime import NativeExecutor
from shardwise.train.trainer import Trainer

# ----------------------------------------------------------------------------------- bounds
# Float32 kernels against the float64 reference, as max |got - want| <= bound * max(|want|, 1)
# per tensor (the scale of tests/training_checks.py).  Every gradient also passes through the
# head (a GEMM over the op's output features and the softmax), so the bounds are per family of
# the op under test:
ELEMENTWISE = 1e-5   # one rounding per element (+ the head's short sums): docs/training.md and
                     # docs/transformers.md claim 1e-5 against PyTorch / the reference
REDUCTION = 1e-5     # sums of up to 300 terms (linear, matmul, conv, pool avg, norms, softmaxes):
                     # measured <= 3.5e-6 (linear_large's loss), so the docs' 1e-5 holds for them too
PLAN = 1e-5          # a plan over 2-3 workers: only the order of sums changes; docs/transformers.md
                     # claims 1e-5 on plans over 2 to 4 workers (docs/training.md's 1e-4 is after
                     # several SGD steps, where differences grow); measured <= 3e-7 here
# Central finite differences of the runtime's float32 forward loss (L ~ 1, eps 1e-3): rounding
# of L (~1e-7) / eps gives ~1e-4 absolute, the eps**2 term is negligible; eps 1e-2 crossed
# relu kinks (fused relu of conv2d / linear); few coordinates of random data avoid the rest.
FD_EPS = 1e-3
FD_RTOL = 2e-2       # of the largest |gradient| of the tensor
FD_ATOL = 3e-4
FD_POINTS = 3        # coordinates per tensor: the largest |gradient| and two random ones

ACTIVATIONS = ("sigmoid", "tanh", "gelu", "silu", "leaky_relu", "clip", "hardsigmoid", "hardswish")
N = 6                # the minibatch: divisible by 2 and 3, so samples split over 2 or 3 workers
CLASSES = 3


@dataclass
class Case:
    """One row of the harness: op ``kind`` built by ``build(g, data)`` where ``data(shape)``
    returns a graph tensor of that shape whose gradient the harness checks; ``splits``: plans of
    the op (named "op") over several workers, as ``sw.Plan.from_dict`` specs; ``bound``: the
    family's bound against the float64 reference on one worker."""

    id: str
    kind: str
    build: Callable[[sw.Graph, Callable[[Sequence[int]], Any]], Any]
    splits: list[dict[str, int]] = field(default_factory=list)
    bound: float = ELEMENTWISE
    int_input: tuple[int, ...] | None = None   # an int64 input (embedding ids) instead of x + p0
    fd: bool = True                            # finite differences (off where the loss is not smooth)
    prepare: Callable[[np.ndarray, dict[str, np.ndarray]], None] | None = None   # edits the data in place
    step: int = 0                              # the training step run (dropout's masks are the step's)


def build_graph(case: Case) -> sw.Graph:
    """The case's graph: data inputs, the op (renamed "op"), the head and the loss."""
    g = sw.Graph(f"conformance_{case.id}")
    made: list[Any] = []

    def data(shape: Sequence[int]) -> Any:
        shape = tuple(shape)
        if not made:   # the first data input: the graph's input plus a parameter of its shape
            x = g.input("x", shape)
            t = g.add(x, g.parameter(shape, name="p0"), name="x_p0")
        else:
            t = g.parameter(shape, name=f"p{len(made)}")
        made.append(t)
        return t

    if case.int_input is not None:
        y = case.build(g, g.input("x", case.int_input, dtype="int64"))
    else:
        y = case.build(g, data)
    if g.ops[-1].name != "op":
        raise AssertionError(f"case {case.id}: the op under test must be the last op built, named 'op'")
    shape = g["op"].shape
    if shape[0] != N:
        raise AssertionError(f"case {case.id}: the op's output {shape} must start with the minibatch {N}")
    if g["op"].kind == "softmax":
        return g
    # (N, C) logits on every backend (the CUDA backend's loss takes no (N, T, C) ones)
    h = g.linear(y if len(shape) == 2 else g.flatten(y, name="head_flatten"), CLASSES, name="head")
    g.softmax(h, name="loss")
    return g


def case_inputs(case: Case, g: sw.Graph, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(input data, labels, float32 parameters): random, reproducible."""
    rng = np.random.default_rng(seed)
    x_op = [op for op in g.ops if op.kind == "input"][0]
    if x_op.attrs.get("dtype") == "int64":
        vocab = min(c.attrs["vocab"] for c in g.ops if c.kind == "embedding")
        x = rng.integers(0, vocab, x_op.shape).astype(np.int64)
    else:
        x = rng.standard_normal(x_op.shape).astype(np.float32)
    loss = [op for op in g.ops if op.kind == "softmax"][-1]
    labels = rng.integers(0, loss.shape[-1], loss.shape[:-1]).astype(np.int64)
    params = {}
    for k, v in init_params(g, 0).items():   # the trainer's initialization, moved off its zeros and ones
        params[k] = (v + 0.3 * rng.standard_normal(v.shape)).astype(np.float32)
    if case.prepare is not None:
        case.prepare(x, params)
    return x, labels, params


# ----------------------------------------------------------------------------------- runs
@dataclass
class Run:
    loss: float
    acts: dict[str, np.ndarray]     # op name -> output (ops whose output the buffers cover)
    grads: dict[str, np.ndarray]    # "op.weight" / "op.bias" -> gradient
    trainer: Trainer | None = None


def plan_of(g: sw.Graph, workers: int, spec: dict[str, int] | None) -> sw.Plan:
    return sw.Plan.from_dict(g, sw.DeviceGraph.cpu(workers), {"op": dict(spec)} if spec else {})


def _assemble(shape: tuple[int, ...], pieces: list[tuple[Any, np.ndarray]]) -> np.ndarray | None:
    out = np.full(shape, np.nan, np.float64)
    for box, a in pieces:
        out[tuple(slice(lo, hi) for lo, hi in box)] = a
    return None if np.isnan(out).any() else out


def run_backend(g: sw.Graph, plan: sw.Plan, backend: str, x: np.ndarray, labels: np.ndarray,
                params: dict[str, np.ndarray], step: int = 0) -> Run:
    """One training step of ``plan`` (SGD, lr 0) through the runtime; the loss, every op's output
    and every parameter's gradient as the runtime's buffers hold them after the step."""
    t = Trainer(g, plan, optimizer=sw.SGD(lr=0.0), backend=backend)
    # the trainer's runtime reuses memory by lifetime; one that keeps every buffer's bytes lets
    # the harness read intermediate outputs and gradients after the step
    t.executor = NativeExecutor(g, plan, t.task_graph, reuse=False, schedule=t.schedule, backend=backend)
    t.set_weights(params)
    t.steps = step
    loss = t.step(x, labels)
    t.steps = step   # finite differences draw the same masks
    tg, rt = t.task_graph, t.executor._rt
    pieces: dict[str, list] = {}
    for b in tg.buffers:
        if b.kind == "activation":
            pieces.setdefault(b.op, []).append((b.box, np.asarray(rt.buffer(b.id), np.float64)))
    acts = {}
    for name, ps in pieces.items():
        a = _assemble(g[name].shape, ps)
        if a is not None:
            acts[name] = a
    owner = {buf: f"{op}.{pname}" for (op, pname, _), buf in tg.params.items()}
    gp: dict[str, list] = {}
    for task in tg.tasks:
        if task.kind == "update":
            grad = tg.buffers[task.reads[1]]
            assert grad.kind == "param_grad", task
            gp.setdefault(owner[task.reads[0]], []).append((grad.box, np.asarray(rt.buffer(grad.id), np.float64)))
    grads = {}
    for key, ps in gp.items():
        grads[key] = _assemble(params[key].shape, ps)
        if grads[key] is None:
            raise AssertionError(f"the updates' gradients of {key} do not cover the parameter")
    return Run(float(loss), acts, grads, t)


def run_reference(g: sw.Graph, x: np.ndarray, labels: np.ndarray, params: dict[str, np.ndarray],
                  step: int = 0) -> Run:
    """The NumPy oracle in float64 (embedding graphs, whose only input is token ids, in float32:
    a gather and a scatter-add, exact in either)."""
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    x64 = x if x.dtype.kind == "i" else x.astype(np.float64)
    loss, grads = ref.loss_and_grads(g, p64, x64, labels, step=step)
    acts = ref.forward(g, p64, x64, step=step)
    return Run(float(loss), {k: np.asarray(v, np.float64) for k, v in acts.items()},
               {k: np.asarray(v, np.float64) for k, v in grads.items()})


# ----------------------------------------------------------------------------------- reports
def check_tensor(what: str, got: Any, want: Any, bound: float, show: int = 5) -> str | None:
    """None when max |got - want| <= bound * max(max |want|, 1), else a report in llm.c's
    check_tensor habit: the first ``show`` mismatches (index, got, expected) and the worst
    absolute and relative differences."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, expected {want.shape}"
    tol = bound * max(float(np.abs(want).max(initial=0.0)), 1.0)
    diff = np.abs(got - want)
    bad = ~(diff <= tol)   # NaN counts as a mismatch
    if not bad.any():
        return None
    lines = [f"{what}: {int(bad.sum())} of {got.size} elements differ by more than {tol:.3g} "
             f"({bound:g} of the scale)"]
    for idx in list(zip(*np.nonzero(bad)))[:show]:
        idx = tuple(int(i) for i in idx)
        lines.append(f"  {idx}: got {got[idx]:.9g}, expected {want[idx]:.9g}")
    worst = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))), diff.shape)
    line = f"  worst absolute difference {diff[worst]:.3g} at {tuple(int(i) for i in worst)}"
    nonzero = want != 0
    if nonzero.any():   # relative to the expected value, where it is not 0
        rel = np.where(nonzero, diff / np.where(nonzero, np.abs(want), 1.0), 0.0)
        worst_rel = np.unravel_index(int(np.argmax(np.where(np.isnan(rel), np.inf, rel))), rel.shape)
        line += f"; worst relative {rel[worst_rel]:.3g} at {tuple(int(i) for i in worst_rel)}"
    lines.append(line)
    return "\n".join(lines)


def max_error(got: Any, want: Any) -> float:
    """max |got - want| / max(max |want|, 1): what :func:`check_tensor` bounds."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max(initial=0.0)) / max(float(np.abs(want).max(initial=0.0)), 1.0)


def compare(got: Run, want: Run, bound: float, where: str) -> list[str]:
    """check_tensor reports of the loss, every op output and every gradient; [] when all agree."""
    out = []
    r = check_tensor(f"{where} loss", [got.loss], [want.loss], bound)
    if r:
        out.append(r)
    if "op" not in got.acts:
        out.append(f"{where}: the runtime's buffers do not cover the output of 'op'")
    for name, a in got.acts.items():
        if name in want.acts and name != "x":   # the graph's input is fed, not computed
            r = check_tensor(f"{where} output of {name!r}", a, want.acts[name], bound)
            if r:
                out.append(r)
    if set(got.grads) != set(want.grads):
        out.append(f"{where}: gradients of {sorted(got.grads)}, expected {sorted(want.grads)}")
    for key in sorted(set(got.grads) & set(want.grads)):
        r = check_tensor(f"{where} gradient {key}", got.grads[key], want.grads[key], bound)
        if r:
            out.append(r)
    return out


def finite_differences(run: Run, g: sw.Graph, x: np.ndarray, labels: np.ndarray, params: dict[str, np.ndarray],
                       seed: int = 0) -> list[str]:
    """Central differences of the runtime's own forward loss at a few coordinates of every
    parameter (data inputs included: they are parameters here) against its backward pass."""
    t = run.trainer
    step = t.steps
    rng = np.random.default_rng(seed)
    out = []
    for key, grad in sorted(run.grads.items()):
        flat = np.abs(grad).ravel()
        picks = {int(np.argmax(flat))} | {int(i) for i in rng.integers(0, flat.size, FD_POINTS - 1)}
        scale = float(flat.max(initial=0.0))
        for i in sorted(picks):
            idx = np.unravel_index(i, grad.shape)
            losses = []
            for sign in (1, -1):
                w = dict(params)
                w[key] = params[key].copy()
                w[key][idx] += sign * FD_EPS
                t.set_weights(w)
                t.steps = step   # dropout: the masks of the step the gradient was taken at
                losses.append(t.loss(x, labels))
            fd = (losses[0] - losses[1]) / (2 * FD_EPS)
            if not abs(fd - grad[idx]) <= FD_RTOL * scale + FD_ATOL:
                out.append(f"finite differences of {key} at {tuple(int(j) for j in idx)}: backward "
                           f"{grad[idx]:.7g}, (L(w+e) - L(w-e)) / 2e {fd:.7g} (e {FD_EPS:g}; bound "
                           f"{FD_RTOL * scale + FD_ATOL:.3g})")
    t.set_weights(params)
    return out


def backend_skip_reason(backend: str, kind: str) -> str | None:
    """Why ``backend`` cannot run op ``kind`` here (None: it can)."""
    if backend == "cuda":
        ok, why = sw.machine.cuda.status()   # not built, no driver or no GPU: says which
        if not ok:
            return why
        if kind not in sw.machine.cuda.op_kinds():
            return f"the CUDA backend has no kernels for {kind!r}"
    elif backend not in sw.backends():
        return f"the {backend} backend is not built into this installation"
    elif kind not in _core.CPU_OP_KINDS:
        return f"the CPU backend has no kernels for {kind!r}"
    return None


def check_case(case: Case, backend: str, workers: int = 1, spec: dict[str, int] | None = None,
               fd: bool = True) -> dict[str, float]:
    """Run ``case`` on ``backend`` with the plan (``workers``, ``spec``), compare against the
    reference (and, when ``fd``, finite differences); raise AssertionError with every report.
    Returns the largest relative error of outputs and gradients (for bound tuning)."""
    g = build_graph(case)
    x, labels, params = case_inputs(case, g)
    want = run_reference(g, x, labels, params, case.step)
    got = run_backend(g, plan_of(g, workers, spec), backend, x, labels, params, case.step)
    bound = case.bound if workers == 1 else max(case.bound, PLAN)
    where = f"[{case.id} on {backend}, {workers} worker(s){' ' + str(spec) if spec else ''}]"
    reports = compare(got, want, bound, where)
    if fd and case.fd:
        reports += [f"{where} {r}" for r in finite_differences(got, g, x, labels, params)]
    if reports:
        raise AssertionError("\n".join(reports))
    errs = {f"out {k}": max_error(v, want.acts[k]) for k, v in got.acts.items() if k in want.acts}
    errs.update({f"grad {k}": max_error(v, want.grads[k]) for k, v in got.grads.items()})
    return errs


# ----------------------------------------------------------------------------------- the cases
def _c(id: str, kind: str, build: Callable, splits: Sequence[dict[str, int]] = (), bound: float = ELEMENTWISE,
       **kw: Any) -> Case:
    return Case(id, kind, build, list(splits), bound, **kw)


def _unary(kind: str, **attrs: Any) -> Callable:
    def build(g, data):
        return getattr(g, kind)(data((N, 4, 5)), name="op", **attrs)
    return build


def _shared(g: sw.Graph, data: Callable) -> Any:
    p = g.parameter((N, 5), name="shared")
    return g.add(g.add(data((N, 5)), p, name="first_reader"), p, name="op")


def _tied(g: sw.Graph, ids: Any) -> Any:
    """embedding(ids, table) -> matmul(h, table^T), the table (7, 6) broadcast over the samples."""
    table = g.parameter((7, 6), name="table")
    h = g.embedding(ids, table=table, name="lookup")
    return g.matmul(h, g.expand(table, (N, 7, 6), name="table_rows"), transpose_b=True, name="op")


EXTREME = np.array([-1e30, -100.0, 0.0, 100.0, 1e30], np.float32)


def _extreme(x: np.ndarray, params: dict[str, np.ndarray], values: dict[str, Any]) -> None:
    """The first data input (x + p0) takes EXTREME in every row, the named parameters ``values``."""
    x[...] = EXTREME
    params["p0.weight"][...] = 0.0
    for k, v in values.items():
        params[f"{k}.weight"][...] = v


def spread(x: np.ndarray, params: dict[str, np.ndarray]) -> None:
    """The first data input over the saturating range (|x| up to ~16) with a few exact zeros."""
    x *= 4
    x.reshape(-1)[::7] = 0.0
    params["p0.weight"][...] = 0.0


def _custom_shift() -> Any:
    @sw.op
    def shift(x):
        return lambda n, c: x[n, c]
    return shift


CASES: list[Case] = [
    # input: the graph's input itself under the head (its output is the data, fed; no gradient)
    _c("input", "input", lambda g, data: g.input("op", (N, 5)), [{"n": 2}, {"c": 5}]),
    _c("parameter", "parameter", lambda g, data: (g.input("x", (N, 5)), g.parameter((N, 5), name="op"))[1],
       [{"n": 3}, {"c": 5}]),
    # a parameter read by two ops: the gradients of its readers are summed into it
    _c("parameter_shared", "add", lambda g, data: _shared(g, data), [{"n": 2}]),
    _c("relu", "relu", _unary("relu"), [{"n": 2}, {"c": 2}, {"n": 3}]),
    _c("relu_rank2", "relu", lambda g, data: g.relu(data((N, 7)), name="op"), [{"n": 3}, {"c": 7}]),
    _c("relu_rank5", "relu", lambda g, data: g.relu(data((N, 2, 3, 2, 3)), name="op"),
       [{"d": 3}, {"c": 2, "w": 3}, {"n": 2, "h": 2}]),
    _c("sigmoid", "sigmoid", _unary("sigmoid"), [{"n": 2}, {"l": 5}]),
    _c("tanh", "tanh", _unary("tanh"), [{"n": 3}, {"c": 2}]),
    _c("gelu", "gelu", _unary("gelu"), [{"n": 2}, {"c": 2}]),
    _c("gelu_tanh", "gelu", _unary("gelu", approximate="tanh"), [{"n": 2}, {"c": 2}]),
    _c("silu", "silu", _unary("silu"), [{"n": 2}, {"l": 5}]),
    _c("leaky_relu", "leaky_relu", _unary("leaky_relu", negative_slope=0.2), [{"n": 2}, {"c": 2}]),
    # the activations over the range where they saturate, ranks 2 and 5, split over workers
    *[_c(f"{k}_saturating", k, (lambda k: lambda g, data: getattr(g, k)(data((N, 40)), name="op"))(k),
         [{"c": 2}, {"n": 3, "c": 4}], prepare=spread, fd=False) for k in ACTIVATIONS],   # zeros: kinks
    *[_c(f"{k}_rank5", k, (lambda k: lambda g, data: getattr(g, k)(data((N, 2, 3, 2, 3)), name="op"))(k),
         [{"d": 3, "c": 2}], prepare=spread, fd=False) for k in ACTIVATIONS],
    _c("dropout", "dropout", _unary("dropout", p=0.3, seed=7), [{"n": 2}, {"c": 2, "l": 5}]),
    # masks of a later step, a 63-bit seed, ranks 2 and 4-5, p from 0.1 to 0.875 (bitwise: test_conformance)
    _c("dropout_rank2", "dropout", lambda g, data: g.dropout(data((N, 37)), 0.1, seed=2**63 - 25, name="op"),
       [{"c": 37}, {"n": 3}], step=917),
    _c("dropout_rank4", "dropout", lambda g, data: g.dropout(data((N, 3, 4, 6)), 0.875, seed=12345, name="op"),
       [{"h": 2, "w": 2}, {"c": 3}], step=5),
    _c("dropout_rank5", "dropout", lambda g, data: g.dropout(data((N, 1, 3, 2, 5)), 0.5, seed=2**40 + 1, name="op"),
       [{"d": 3}, {"n": 2, "w": 5}], step=1),
    _c("add", "add", lambda g, data: g.add(data((N, 4, 5)), data((N, 4, 5)), name="op"), [{"n": 2}, {"c": 2}]),
    _c("add_rank4", "add", lambda g, data: g.add(data((N, 2, 3, 4)), data((N, 2, 3, 4)), name="op"),
       [{"h": 3}, {"c": 2, "w": 2}]),
    _c("add_broadcast", "add", lambda g, data: g.add(data((N, 4, 5)), data((5,)), name="op"),
       [{"n": 3}, {"l": 5}]),
    _c("concat", "concat", lambda g, data: g.concat([data((N, 2, 5)), data((N, 3, 5))], axis=1, name="op"),
       [{"n": 2}, {"c": 5}]),
    _c("concat_axis2", "concat", lambda g, data: g.concat([data((N, 2, 3)), data((N, 2, 4))], axis=2, name="op"),
       [{"l": 7}, {"n": 3}]),
    _c("flatten", "flatten", lambda g, data: g.flatten(data((N, 2, 3, 2)), name="op"), [{"n": 2}, {"c": 2}]),
    _c("reshape", "reshape", lambda g, data: g.reshape(data((N, 12)), (N, 3, 4), name="op"), [{"n": 2}, {"c": 3}]),
    _c("permute", "permute", lambda g, data: g.permute(data((N, 3, 4)), (0, 2, 1), name="op"), [{"n": 2}, {"c": 2}]),
    _c("select", "select", lambda g, data: g.select(data((N, 3, 4, 2)), 1, 2, name="op"), [{"n": 2}, {"c": 2}]),
    _c("lstm_cell", "lstm_cell",
       lambda g, data: g.lstm_cell(data((N, 4)), data((N, 4)), data((N, 4)), data((N, 4)), name="op"),
       [{"n": 2}, {"c": 2}]),
    _c("lstm_hidden", "lstm_hidden", lambda g, data: g.lstm_hidden(data((N, 4)), data((N, 4)), name="op"),
       [{"n": 3}, {"c": 2}]),
    # huge pre-activations saturate the sigmoid and tanh instead of overflowing to NaN: i = f = g
    # and o = c run through -1e30, -100, 0, 100, 1e30 (c_prev 1); outputs 0, 0, 0.5, 2, 2 and 0, 0,
    # 0, 1, 1, every gradient finite (the comparison fails on NaN)
    _c("lstm_cell_extreme", "lstm_cell",
       lambda g, data: g.lstm_cell(data((N, 5)), data((N, 5)), data((N, 5)), data((N, 5)), name="op"),
       [{"c": 5}], prepare=lambda x, p: _extreme(x, p, {"p1": EXTREME, "p2": EXTREME, "p3": 1.0})),
    _c("lstm_hidden_extreme", "lstm_hidden", lambda g, data: g.lstm_hidden(data((N, 5)), data((N, 5)), name="op"),
       [{"n": 2}], prepare=lambda x, p: _extreme(x, p, {"p1": EXTREME})),
    # reductions
    _c("linear", "linear", lambda g, data: g.linear(data((N, 8)), 6, name="op"),
       [{"n": 2}, {"c": 3}, {"i": 2}, {"n": 3}, {"n": 2, "c": 3}], bound=REDUCTION),
    # GEMMs of (24, 300) x (300, 129) (OpenBLAS' blocked paths) and of one input feature
    _c("linear_large", "linear", lambda g, data: g.linear(data((N, 4, 300)), 129, name="op"),
       [{"l": 3}, {"n": 2, "l": 3}], bound=REDUCTION),
    _c("linear_one_feature", "linear", lambda g, data: g.linear(data((N, 1)), 17, name="op"),
       [{"n": 3}], bound=REDUCTION),
    _c("linear_relu_nobias", "linear", lambda g, data: g.linear(data((N, 4, 7)), 5, activation="relu", bias=False,
                                                                   name="op"),
       [{"n": 2}, {"l": 5}], bound=REDUCTION),
    _c("matmul", "matmul", lambda g, data: g.matmul(data((N, 3, 4)), data((N, 4, 5)), name="op"),
       [{"n": 2}, {"c": 3}, {"l": 5}], bound=REDUCTION),
    _c("matmul_transposed", "matmul",
       lambda g, data: g.matmul(data((N, 4, 3)), data((N, 5, 4)), transpose_a=True, transpose_b=True, name="op"),
       [{"n": 3}, {"l": 5}], bound=REDUCTION),
    _c("matmul_4d", "matmul", lambda g, data: g.matmul(data((N, 2, 3, 4)), data((N, 2, 4, 5)), name="op"),
       [{"c": 2}, {"h": 3, "w": 5}], bound=REDUCTION),
    _c("conv2d", "conv2d", lambda g, data: g.conv2d(data((N, 3, 6, 6)), 4, 3, padding=1, activation="relu",
                                                   name="op"),
       [{"n": 2}, {"c": 2}, {"h": 2}, {"ci": 3}, {"n": 3}], bound=REDUCTION),
    _c("conv2d_stride_nobias", "conv2d",
       lambda g, data: g.conv2d(data((N, 2, 7, 7)), 3, 3, stride=2, padding=0, bias=False, name="op"),
       [{"w": 3}], bound=REDUCTION),
    _c("conv2d_dilated", "conv2d",
       lambda g, data: g.conv2d(data((N, 2, 7, 7)), 2, 3, padding=2, dilation=2, name="op"),
       [{"h": 7}], bound=REDUCTION),
    _c("conv2d_grouped", "conv2d",
       lambda g, data: g.conv2d(data((N, 4, 5, 5)), 6, 3, padding=1, groups=2, name="op"),
       [{"c": 2}, {"n": 2}], bound=REDUCTION),
    _c("conv2d_depthwise", "conv2d",
       lambda g, data: g.conv2d(data((N, 3, 5, 5)), 3, 3, padding=1, groups=3, name="op"),
       [{"c": 3}, {"h": 5}], bound=REDUCTION),
    _c("pool2d_max", "pool2d", lambda g, data: g.pool2d(data((N, 2, 6, 6)), 2, kind="max", name="op"),
       [{"n": 2}, {"h": 3}, {"c": 2, "w": 3}], bound=REDUCTION),
    _c("pool2d_max_padded", "pool2d",
       lambda g, data: g.pool2d(data((N, 2, 5, 5)), 3, stride=2, padding=1, kind="max", name="op"),
       [{"w": 3}], bound=REDUCTION),
    _c("pool2d_avg", "pool2d",
       lambda g, data: g.pool2d(data((N, 2, 5, 5)), 3, stride=1, padding=1, kind="avg", name="op"),
       [{"h": 5}, {"c": 2}], bound=REDUCTION),
    # statistics: partial sums per worker's box (samples, channels, rows, columns), reduced
    _c("batchnorm2d", "batchnorm2d", lambda g, data: g.batchnorm2d(data((N, 3, 4, 4)), name="op"),
       [{"n": 2}, {"c": 3}, {"n": 3}, {"h": 2}, {"n": 2, "w": 2}, {"c": 3, "h": 2}], bound=REDUCTION,
       prepare=lambda x, p: x.__imul__(2).__iadd__(0.5)),
    _c("layer_norm", "layer_norm", lambda g, data: g.layer_norm(data((N, 4, 6)), name="op"),
       [{"n": 2}, {"c": 2}, {"l": 2}, {"l": 3}], bound=REDUCTION),   # l: the normalized dimension
    _c("softmax_dim", "softmax_dim", lambda g, data: g.softmax_dim(data((N, 4, 5)), -1, scale=0.7, name="op"),
       [{"n": 2}, {"c": 2}, {"l": 5}], bound=REDUCTION),
    _c("softmax_dim1", "softmax_dim", lambda g, data: g.softmax_dim(data((N, 4, 5)), 1, name="op"),
       [{"c": 2}, {"l": 5}], bound=REDUCTION),
    _c("softmax_dim_causal", "softmax_dim",
       lambda g, data: g.softmax_dim(data((N, 4, 4)), -1, causal=True, name="op"),
       [{"n": 3}, {"c": 2}], bound=REDUCTION),
    _c("embedding", "embedding", lambda g, ids: g.embedding(ids, 7, 6, name="op"),
       [{"n": 2}, {"c": 2}, {"l": 3}, {"n": 2, "c": 2}], bound=REDUCTION, int_input=(N, 4)),
    # the table a data input, a parameter op's: its gradient flows to the parameter op
    _c("embedding_table", "embedding",
       lambda g, ids: g.embedding(ids, table=g.parameter((7, 6), name="table"), name="op"),
       [{"n": 2}, {"c": 2}, {"l": 3}, {"n": 2, "c": 2}], bound=REDUCTION, int_input=(N, 4)),
    # tied embeddings: the table read by the look-up and by the output product (a language
    # model's head), so the parameter op sums two gradients
    _c("embedding_tied", "matmul", lambda g, ids: _tied(g, ids),
       [{"n": 2}, {"c": 2}, {"k": 2}], bound=REDUCTION, int_input=(N, 4)),
    # the loss itself: (N, C) and sequence (N, T, C) logits
    _c("softmax", "softmax", lambda g, data: g.softmax(data((N, 6)), name="op"),
       [{"n": 2}, {"n": 3}, {"c": 3}, {"n": 2, "c": 2}], bound=REDUCTION),
    # large logits (one row + 80): the row maximum keeps exp finite
    _c("softmax_large_logits", "softmax", lambda g, data: g.softmax(data((N, 6)), name="op"),
       [{"c": 2}], bound=REDUCTION, prepare=lambda x, p: x.__setitem__(0, x[0] * 5 + 80)),
    _c("softmax_seq", "softmax",
       lambda g, data: g.softmax(g.linear(data((N, 3, 5)), 4, name="logits"), name="op"),
       [{"n": 2}, {"c": 3}], bound=REDUCTION),
    # broadcasting (shardwise.ops.bcast): a squeeze-and-excitation scale first, as torchvision writes it
    _c("mul_se", "mul", lambda g, data: g.mul(data((N, 3, 1, 1)), data((N, 3, 4, 5)), name="op"),
       [{"n": 2}, {"c": 3}, {"h": 2}, {"w": 5}, {"n": 2, "w": 5}]),
    _c("mul_table", "mul", lambda g, data: g.mul(data((N, 4, 5)), data((4, 1)), name="op"), [{"c": 2}, {"l": 5}]),
    _c("broadcast_add", "broadcast_add", lambda g, data: g.add(data((N, 4, 5)), data((1, 4, 5)), name="op"),
       [{"n": 2}, {"c": 2}, {"l": 5}]),
    _c("broadcast_add_channels", "broadcast_add",
       lambda g, data: g.broadcast_add(data((N, 3, 4, 5)), data((3, 1, 1)), name="op"), [{"c": 3}, {"h": 2}]),
    _c("expand", "expand", lambda g, data: g.expand(data((N, 1, 5)), (N, 4, 5), name="op"),
       [{"n": 2}, {"c": 2}, {"l": 5}]),
    _c("concat_class_token", "concat",
       lambda g, data: (lambda x, t: g.concat([g.expand(t, (N, 1, 5), name="token"), x], axis=1, name="op"))(
           data((N, 3, 5)), data((1, 1, 5))), [{"n": 2}, {"c": 2}, {"l": 5}]),
    _c("slice", "slice", lambda g, data: g.slice(data((N, 6, 5)), 1, 1, 5, name="op"), [{"n": 2}, {"c": 2}, {"l": 5}]),
    _c("slice_step", "slice", lambda g, data: g.slice(data((N, 3, 7)), 2, 1, 7, 2, name="op"), [{"l": 3}]),
    _c("stochastic_depth", "stochastic_depth",
       lambda g, data: g.stochastic_depth(data((N, 4, 5)), 0.5, seed=7, name="op"), [{"n": 2}, {"c": 2}, {"n": 3}]),
    _c("stochastic_depth_batch", "stochastic_depth",
       lambda g, data: g.stochastic_depth(data((N, 2, 3, 2)), 0.3, mode="batch", seed=11, name="op"), [{"n": 2}],
       step=1),
    _c("upsample_nearest", "upsample_nearest", lambda g, data: g.upsample_nearest(data((N, 2, 3, 2)), 2, name="op"),
       [{"n": 2}, {"h": 3}, {"w": 2}, {"c": 2, "h": 3}]),
    _c("pool2d_max_ceil", "pool2d",
       lambda g, data: g.pool2d(data((N, 2, 6, 6)), 3, stride=2, kind="max", ceil_mode=True, name="op"),
       [{"h": 3}, {"n": 2, "w": 3}], bound=REDUCTION),
    # adaptive average pooling that upsamples (2x3 -> 5x4: overlapping windows) and that shrinks
    _c("adaptive_avg_pool2d_up", "adaptive_avg_pool2d",
       lambda g, data: g.adaptive_avg_pool2d(data((N, 2, 2, 3)), (5, 4), name="op"),
       [{"n": 2}, {"c": 2}, {"n": 3, "c": 2}], bound=REDUCTION),   # rows and columns: whole (the division's granule)
    _c("adaptive_avg_pool2d_down", "adaptive_avg_pool2d",
       lambda g, data: g.adaptive_avg_pool2d(data((N, 2, 7, 5)), (3, 2), name="op"),
       [{"c": 2}], bound=REDUCTION),
    _c("upsample_bilinear", "upsample_bilinear",
       lambda g, data: g.upsample_bilinear(data((N, 2, 3, 4)), (2, 3), name="op"), [{"n": 2}, {"c": 2}, {"h": 3}, {"w": 2}],
       bound=REDUCTION),
    # clip (ReLU6, Hardtanh, clamp), hard sigmoid and hard swish: kinks away from most data
    _c("clip", "clip", _unary("clip", lo=-0.5, hi=0.7), [{"n": 2}, {"c": 2}]),
    _c("relu6", "clip", lambda g, data: g.relu6(data((N, 4, 5)), name="op"), [{"l": 5}], prepare=spread, fd=False),
    _c("hardsigmoid", "hardsigmoid", _unary("hardsigmoid"), [{"n": 2}, {"c": 2}]),
    _c("hardswish", "hardswish", _unary("hardswish"), [{"n": 3}, {"l": 5}]),
    # batch norm with another eps (MobileNet's 1e-3; a large one, so that a forgotten eps shows)
    _c("batchnorm2d_eps", "batchnorm2d", lambda g, data: g.batchnorm2d(data((N, 3, 4, 4)), eps=0.5, name="op"),
       [{"n": 2}, {"c": 3}, {"h": 2}], bound=REDUCTION, prepare=lambda x, p: x.__imul__(2).__iadd__(0.5)),
    _c("rms_norm", "rms_norm", lambda g, data: g.rms_norm(data((N, 4, 6)), eps=1e-5, name="op"),
       [{"n": 2}, {"c": 2}, {"l": 2}, {"l": 3}], bound=REDUCTION),   # l: the normalized dimension
    # a linear over channels-last (N, H, W, C) (ConvNeXt's MLP), and a layer norm there
    _c("linear_rank4", "linear", lambda g, data: g.linear(data((N, 2, 3, 5)), 4, name="op"),
       [{"n": 2}, {"h": 3}, {"c": 2, "w": 2}, {"i": 5}], bound=REDUCTION),
    _c("layer_norm_rank4", "layer_norm", lambda g, data: g.layer_norm(data((N, 2, 3, 5)), eps=1e-6, name="op"),
       [{"h": 3}, {"c": 2, "w": 5}], bound=REDUCTION),
    _c("rms_norm_rank2", "rms_norm", lambda g, data: g.rms_norm(data((N, 9)), eps=0.1, name="op"),
       [{"c": 3}], bound=REDUCTION),
    # group norm: splits of samples, of channels on group boundaries (c: 2 of 2 groups) and inside
    # groups (c: 4 of 2 groups, 3 of 1 group), of rows and columns (every worker reads whole groups)
    _c("group_norm", "group_norm", lambda g, data: g.group_norm(data((N, 4, 3, 5)), 2, name="op"),
       [{"n": 2}, {"c": 2}, {"c": 4}, {"h": 3}, {"w": 5}, {"n": 3, "c": 2}, {"c": 2, "h": 3}], bound=REDUCTION,
       prepare=lambda x, p: x.__imul__(2).__iadd__(0.5)),
    _c("group_norm_one_group", "group_norm",
       lambda g, data: g.group_norm(data((N, 6, 2, 3)), 1, eps=0.5, affine=False, name="op"),
       [{"c": 3}, {"n": 2, "w": 3}], bound=REDUCTION),   # a large eps, so that a forgotten one shows
    _c("group_norm_instance", "group_norm",
       lambda g, data: g.group_norm(data((N, 3, 4, 2)), 3, eps=1e-3, name="op"), [{"c": 3}, {"h": 2}],
       bound=REDUCTION),
    # rotary position embedding of (N, H, T, Dh): base 10 turns the angles of every column a lot
    # over 4 positions; h: positions split (each worker's t is global), w: Dh (whole rows read)
    _c("rotary", "rotary", lambda g, data: g.rotary(data((N, 2, 4, 6)), base=10.0, name="op"),
       [{"n": 2}, {"c": 2}, {"h": 2}, {"w": 2}, {"h": 2, "w": 3}]),
    _c("rotary_rank3", "rotary", lambda g, data: g.rotary(data((N, 5, 4)), base=3.0, name="op"), [{"c": 5}]),
]

# op kinds no backend trains: the case checks that the trainer refuses them, naming the op
REFUSED_CASES: dict[str, Callable[[sw.Graph], Any]] = {
    "custom": lambda g: g.custom(_custom_shift(), [g.input("x", (N, 4))], name="op"),
}


def covered_kinds() -> set[str]:
    return {c.kind for c in CASES} | set(REFUSED_CASES)
