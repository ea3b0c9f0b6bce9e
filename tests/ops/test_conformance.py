"""Every op kind x every backend, forward and backward, against the NumPy reference (float64)
and finite differences, through the real runtime on 1 worker and on plans splitting the op over
2-3 workers (the harness: tests/ops/conformance.py).  A new op kind must add a case there."""
from __future__ import annotations

import math

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core

from conformance import (CASES, N, REFUSED_CASES, Case, build_graph, case_inputs, check_case, check_tensor,
                         compare, covered_kinds, plan_of, run_backend, run_reference, backend_skip_reason)

BACKENDS = ("cpu", "cuda")   # "cuda" runs where the extension is built and a GPU is usable


def _workers(spec: dict[str, int]) -> int:
    return math.prod(spec.values())


def _require(backend: str, kind: str) -> None:
    why = backend_skip_reason(backend, kind)
    if why:
        pytest.skip(why)


def _check(case: Case, backend: str, workers: int = 1, spec: dict | None = None, fd: bool = True) -> None:
    _require(backend, case.kind)
    try:
        check_case(case, backend, workers, spec, fd=fd)
    except sw.ConfigError as exc:   # a backend refusing an op variant (the CUDA backend's limits)
        if backend == "cpu":
            raise
        pytest.skip(f"the {backend} backend refuses this variant: {exc}")


def test_every_op_kind_has_a_case():
    """A kind added to csrc/ops.def without a harness case fails here."""
    missing = set(_core.OP_KINDS) - covered_kinds()
    assert not missing, f"op kinds with no conformance case in tests/ops/conformance.py: {sorted(missing)}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_builds_the_op_it_names(case):
    g = build_graph(case)
    assert g["op"].kind == case.kind


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_on_one_worker(case, backend):
    """Output, loss and every gradient against the reference; gradients against finite differences."""
    _check(case, backend)


SPLITS = [(c, s) for c in CASES for s in c.splits]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case,spec", SPLITS, ids=[f"{c.id}-{'-'.join(f'{k}{v}' for k, v in s.items())}"
                                                   for c, s in SPLITS])
def test_op_split_over_workers(case, spec, backend):
    """The op split over 2-3 workers (samples, channels, rows, a reduction) computes the same."""
    _check(case, backend, _workers(spec), spec, fd=False)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_exhaustive(case, seed, monkeypatch):
    """Other data, every split, with finite differences on every plan."""
    import conformance

    _require("cpu", case.kind)
    real = conformance.case_inputs
    monkeypatch.setattr(conformance, "case_inputs", lambda c, g, seed_=0: real(c, g, seed))
    check_case(case, "cpu")
    for spec in case.splits:
        check_case(case, "cpu", _workers(spec), spec)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(REFUSED_CASES))
def test_op_without_kernels_plans_but_is_refused(kind, backend):
    """Kinds no backend trains (described ops): planned on several workers, refused by the trainer
    naming the op and its kind."""
    why = backend_skip_reason(backend, "input")
    if why:
        pytest.skip(why)
    g = sw.Graph(f"refused_{kind}")
    y = REFUSED_CASES[kind](g)
    g.softmax(g.linear(y, 3, name="head"), name="loss")
    assert g["op"].kind == kind
    plan = plan_of(g, 2, {"n": 2})
    assert plan.configs["op"].degrees[0] == 2
    with pytest.raises(sw.ConfigError, match=f"no kernels for op kind '{kind}' \\(op 'op'\\)"):
        sw.Trainer(g, plan, backend=backend)


# --------------------------------------------------------------------------- the harness itself
def test_check_tensor_reports_first_mismatches_and_the_worst():
    want = np.arange(12, dtype=np.float64).reshape(3, 4)
    got = want.copy()
    assert check_tensor("t", got, want, 1e-5) is None
    got[1, 2] += 0.5
    got[2, 3] = np.nan
    report = check_tensor("t", got, want, 1e-5)
    assert report.splitlines()[0].startswith("t: 2 of 12 elements differ by more than")
    assert "(1, 2): got 6.5, expected 6" in report
    assert "(2, 3): got nan, expected 11" in report
    assert "worst absolute difference nan at (2, 3)" in report
    assert check_tensor("t", got[:2], want, 1e-5) == "t: shape (2, 4), expected (3, 4)"


def test_harness_catches_a_wrong_gradient():
    """Weights the runtime and the reference disagree on (by 1e-3 in one element) fail the
    comparison, naming the tensors that differ: the harness is not vacuous."""
    case = next(c for c in CASES if c.id == "conv2d")
    g = build_graph(case)
    x, labels, params = case_inputs(case, g)
    want = run_reference(g, x, labels, params)
    wrong = dict(params)
    wrong["op.weight"] = params["op.weight"].copy()
    wrong["op.weight"][1, 0, 1, 1] += 1e-3
    got = run_backend(g, plan_of(g, 1, None), "cpu", x, labels, wrong)
    reports = compare(got, want, case.bound, "[mutated]")
    assert reports
    text = "\n".join(reports)
    assert "output of 'op'" in text and "gradient op.weight" in text and "worst absolute difference" in text


def test_finite_differences_catch_a_wrong_backward():
    """Gradients 10% off the runtime's own forward fail the finite-difference check."""
    from conformance import finite_differences

    case = next(c for c in CASES if c.id == "gelu")
    g = build_graph(case)
    x, labels, params = case_inputs(case, g)
    run = run_backend(g, plan_of(g, 1, None), "cpu", x, labels, params)
    assert finite_differences(run, g, x, labels, params) == []
    run.grads = {k: v * 1.1 for k, v in run.grads.items()}
    reports = finite_differences(run, g, x, labels, params)
    assert reports and all(r.startswith("finite differences of ") for r in reports)
    assert {r.split()[3] for r in reports} == set(run.grads)


def test_the_minibatch_splits_two_and_three_ways():
    assert N % 2 == 0 and N % 3 == 0


# --------------------------------------------------------------------------- named values
def _outputs(case_id: str, workers: int = 1, spec: dict | None = None):
    case = next(c for c in CASES if c.id == case_id)
    g = build_graph(case)
    x, labels, params = case_inputs(case, g)
    return run_backend(g, plan_of(g, workers, spec), "cpu", x, labels, params)


@pytest.mark.parametrize("workers,spec", [(1, None), (5, {"c": 5})])
def test_lstm_extreme_inputs_saturate_instead_of_overflowing(workers, spec):
    """Pre-activations -1e30, -100, 0, 100, 1e30: sigmoid(f) * 1 + sigmoid(i) * tanh(g) with
    i = f = g is 0, 0, 0.5, 2, 2; sigmoid(o) * tanh(c) with o = c is 0, 0, 0, 1, 1; every
    gradient is finite (replaces test_kernels_misc's test_lstm_extreme_inputs_stay_finite)."""
    run = _outputs("lstm_cell_extreme", workers, spec)
    np.testing.assert_allclose(run.acts["op"], np.tile([0.0, 0.0, 0.5, 2.0, 2.0], (N, 1)), atol=1e-6)
    assert all(np.isfinite(gr).all() for gr in run.grads.values())
    run = _outputs("lstm_hidden_extreme")
    np.testing.assert_allclose(run.acts["op"], np.tile([0.0, 0.0, 0.0, 1.0, 1.0], (N, 1)), atol=1e-6)
    assert all(np.isfinite(gr).all() for gr in run.grads.values())


def test_large_logits_keep_the_loss_finite_and_classes_split_alike():
    """A row of logits near 80 (exp overflows float32 beyond 88): the row maximum keeps p finite;
    workers holding parts of the classes each compute the row statistics and get the same bits
    (replaces test_kernels_misc's test_softmax_xent_whole_and_class_split)."""
    whole = _outputs("softmax_large_logits")
    assert whole.acts["x_p0"][0].min() > 60 and np.isfinite(whole.loss)
    split = _outputs("softmax_large_logits", 2, {"c": 2})
    np.testing.assert_array_equal(split.acts["op"], whole.acts["op"])
    assert split.loss == pytest.approx(whole.loss, rel=1e-6)


@pytest.mark.calibration   # compares this thread's pauses with the step's time
def test_a_training_step_releases_the_gil():
    """The runtime runs a whole step with the GIL released, LSTM kernels included (replaces
    test_kernels_misc's test_lstm_kernels_release_the_gil)."""
    from strategies_random import assert_other_threads_run

    g = sw.Graph("gil")
    shape = (64, 4096)
    ins = [g.parameter(shape, name=f"p{k}") for k in range(3)]
    x = g.input("x", shape)
    c = g.lstm_cell(x, *ins, name="cell")
    g.softmax(g.linear(c, 2, name="head"), name="loss")
    t = sw.Trainer(g, plan_of(g, 1, None))
    data = np.ones(shape, np.float32)
    labels = np.zeros(shape[0], np.int64)
    assert_other_threads_run(lambda: [t.step(data, labels) for _ in range(4)])


# --------------------------------------------------------------------------- bit for bit
ELEMENTWISE_KINDS = {"relu", "sigmoid", "tanh", "gelu", "silu", "leaky_relu", "dropout", "add", "lstm_cell",
                     "lstm_hidden", "flatten", "reshape", "permute", "select", "concat", "clip", "hardsigmoid",
                     "hardswish"}
BITWISE = [(c, s) for c in CASES if c.kind in ELEMENTWISE_KINDS for s in c.splits]


@pytest.mark.parametrize("case,spec", BITWISE, ids=[f"{c.id}-{'-'.join(f'{k}{v}' for k, v in s.items())}"
                                                    for c, s in BITWISE])
def test_elementwise_ops_split_give_the_bits_of_one_worker(case, spec):
    """An element-wise op computes each element with the same arithmetic whatever box a worker
    holds: its output and its inputs' gradients are the one-worker run's bit for bit (replaces the
    random-box checks of test_activations' test_kernels_whole_and_sharded_match_reference)."""
    g = build_graph(case)
    x, labels, params = case_inputs(case, g)
    whole = run_backend(g, plan_of(g, 1, None), "cpu", x, labels, params, case.step)
    split = run_backend(g, plan_of(g, _workers(spec), spec), "cpu", x, labels, params, case.step)
    np.testing.assert_array_equal(split.acts["op"], whole.acts["op"])
    for key, grad in whole.grads.items():
        # per-sample data inputs (not the head's weights nor a broadcast input: sums over the batch)
        if key.startswith("p") and grad.shape[0] == N:
            np.testing.assert_array_equal(split.grads[key], grad, err_msg=key)


DROPOUT = [(c, s) for c in CASES if c.kind == "dropout" for s in [None, *c.splits]]


@pytest.mark.parametrize("case,spec", DROPOUT, ids=[f"{c.id}-{'-'.join(f'{k}{v}' for k, v in (s or {}).items())}"
                                                    for c, s in DROPOUT])
def test_dropout_output_is_the_reference_bit_for_bit(case, spec):
    """The kernel's mask and scaling equal the reference's bit for bit on every worker's box, for
    63-bit seeds and later steps (replaces test_dropout's test_kernel_equals_reference_bitwise_on_every_box)."""
    from shardwise.reference import dropout as rd

    g = build_graph(case)
    x, labels, params = case_inputs(case, g)
    run = run_backend(g, plan_of(g, _workers(spec or {}), spec), "cpu", x, labels, params, case.step)
    a = g["op"].attrs
    src = run.acts["x_p0"].astype(np.float32)
    want = rd.dropout_forward(src, a["p"], a["seed"], case.step)
    np.testing.assert_array_equal(run.acts["op"].astype(np.float32), want)
    kept = want != 0
    assert 0 < kept.mean() < 1
