"""torchvision's models imported from their ONNX export are the network sw.from_torch builds of
the model itself, so they train as from_torch's import does, which test_torchvision_zoo.py
compares with PyTorch.

Each model of test_torchvision_zoo.py's list (its model in train mode, its minibatch of 4 random
images) is imported twice: by sw.from_torch from the model, and by sw.from_onnx from its
eval-mode export by PyTorch's default exporter (``optimize=False``, as
test_torchvision_onnx_zoo.py exports).  The two imports must have

- the same ops in the same order: kinds, output shapes, attributes, the positions of their
  inputs' producers and their descriptions (the iteration space, and each input's role, shape
  and index map: all that the planner, the lowering and the kernels read of an op).  The ops'
  names are each importer's own and are left out (the flatten before a classifier is
  from_torch's ``flatten`` and the exported node's ``reshape``);
- the same weights under the same names (the model's ``state_dict`` names), bit for bit, each
  read by the op at the same position; from_torch's ``num_batches_tracked`` counts aside (ONNX
  has none; the trainer counts from its step count, docs/importing.md);
- the same configuration of each op, by position, in sw.search's plans on 2 and 4 CPU workers;
- the same loss and the same weights after one step of SGD with momentum, of Adam and of AdamW
  (test_torchvision_zoo.py's optimizers) on those plans: every array get_weights returns, the
  running statistics included, bit for bit.

Why that carries test_torchvision_zoo.py's comparison with PyTorch's float64 run (three steps
of each optimizer on the 2- and 4-worker searched plans, test_three_steps_on_searched_plans)
over to the ONNX import: a trainer's step is a function of the ops' structure (as compared
above), the plan's configurations, the weights, the optimizer's state and the minibatch.  An
op's name enters the arithmetic only where the graph draws random numbers (dropout and
stochastic depth seed their masks from it), and these models draw none in training.  Equal
structure, plans and weights thus make equal steps, every step; the bitwise steps check that
nothing the comparison leaves out (the names, the weight map) changes a bit.  The ONNX import
then trains on its own searched plans exactly as from_torch's import does on its own.

Where the export records a model differently the graphs differ and this route does not apply;
test_torchvision_onnx_train.py compares those ONNX imports with PyTorch directly: densenet121
(torch.cat of one tensor, in the first layer of each dense block, is a ``concat`` op of one
input in from_torch's import and no node in the export) and mnasnet0_5 (its batch norms'
momentum, ``1 - 0.9997`` in PyTorch, is a float32 attribute in ONNX, which the importer reads
back as 0.0003; test_mnasnet0_5_import_differs_only_in_float64_digits_of_momentum shows that,
with the momenta compared in float32 as the kernels take them, the two imports are one network
and step alike).  So are the vision transformers: their from_torch imports are checked on fewer
plans and optimizers (test_torchvision_vit.py, test_torchvision_swin.py), and the exporter
splits ViT's packed attention projection its own way.

Quick: squeezenet1_1; the rest is marked slow (an export takes 5 to 20 s here, the searches
and six steps of both imports up to two minutes).
"""
from __future__ import annotations

import copy
import re

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript: pip install onnxscript")

from test_torchvision_onnx_zoo import export  # noqa: E402  (skips the module without torchvision)
from test_torchvision_zoo import OPTIMIZERS, ZOO, Net, model_and_batch  # noqa: E402

# the exports record these differently (the module's docstring): test_torchvision_onnx_train.py
SPELLED_DIFFERENTLY = {"densenet121", "mnasnet0_5"}
QUICK = {"squeezenet1_1"}
WORKERS = (2, 4)
COUNT = "num_batches_tracked"


def _equal(a, b) -> bool:
    """Equal values of op attributes: arrays element by element, containers item by item."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _momentum_in_float32(a: dict, b: dict) -> bool:
    """Equal attributes but for a batch norm's momentum, which is compared as the kernels take
    it: in float32 (csrc/cpu/batchnorm.c)."""
    a, b = dict(a), dict(b)
    momenta = a.pop("momentum", None), b.pop("momentum", None)
    same = momenta[0] == momenta[1] if None in momenta else np.float32(momenta[0]) == np.float32(momenta[1])
    return same and _equal(a, b)


def assert_same_structure(ours: sw.Graph, theirs: sw.Graph, same_attrs=_equal) -> None:
    """The same ops in the same order, but for their names (the module's docstring); attributes
    compared by ``same_attrs``."""
    assert len(ours.ops) == len(theirs.ops), f"{len(ours.ops)} ops against {len(theirs.ops)}"
    for a, b in zip(ours.ops, theirs.ops):
        where = f"op {a.index} ({a.name!r} against {b.name!r})"
        assert a.kind == b.kind, f"{where}: kind {a.kind} against {b.kind}"
        assert a.shape == b.shape, f"{where}: shape {a.shape} against {b.shape}"
        assert a.inputs == b.inputs, f"{where}: inputs from ops {a.inputs} against {b.inputs}"
        assert same_attrs(a.attrs, b.attrs), f"{where}: attributes {a.attrs} against {b.attrs}"
        assert a.desc == b.desc, f"{where}: descriptions differ:\n{a.desc}\n{b.desc}"


def weight_positions(g: sw.Graph, weights: dict) -> dict:
    """(the position of the op that reads it, its key under the op: "weight", "running_mean", ...)
    -> the model's name of each weight (Graph.weight_names maps the graph's "<op>.<key>" to it)."""
    out = {}
    for key in g.graph_weights({k: v for k, v in weights.items() if not k.endswith(COUNT)}):
        op, _, what = key.rpartition(".")
        assert op in g, f"the weight key {key!r} names no op"
        out[(g[op].index, what)] = g.weight_names.get(key, key)
    return out


def assert_bitwise_equal(ours: dict, theirs: dict, what: str) -> None:
    assert set(ours) == set(theirs), f"{what}: names {sorted(set(ours) ^ set(theirs))[:4]} in one only"
    for key, a in ours.items():
        a, b = np.asarray(a), np.asarray(theirs[key])
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{what}: {key} {a.dtype}{a.shape} against {b.dtype}{b.shape}"
        assert a.tobytes() == b.tobytes(), \
            f"{what}: {key} differs by up to {np.abs(a.astype(np.float64) - b).max():.3g}"


def one_step(net: Net, plan: sw.Plan, optimizer: str) -> tuple[float, dict]:
    ours, _, kwargs = OPTIMIZERS[optimizer]
    t = sw.Trainer(net.graph, plan, optimizer=ours(**kwargs))
    t.set_weights(net.weights)
    loss = t.step(net.x, net.y)
    return loss, t.get_weights()


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=() if n in QUICK else pytest.mark.slow)
                                  for n in ZOO if n not in SPELLED_DIFFERENTLY])
def test_onnx_import_is_from_torchs_network(tmp_path, name):
    assert_same_network(*imports(name, tmp_path))


@pytest.mark.slow
def test_mnasnet0_5_import_differs_only_in_float64_digits_of_momentum(tmp_path):
    """mnasnet0_5's batch norms' momentum is ``1 - 0.9997`` (0.00029999999999996696) in PyTorch;
    the export records ``0.9997`` as a float32 attribute and the import reads 0.0003 back.  The
    kernels take the momentum in float32, where the two are one number: with the momentum so
    compared, the two imports are the same network and train bit for bit alike."""
    torch_net, onnx_net = imports("mnasnet0_5", tmp_path)
    with pytest.raises(AssertionError, match=re.escape("attributes {'momentum': 0.00029999999999996696} against "
                                                       "{'momentum': 0.0003}")):
        assert_same_structure(torch_net.graph, onnx_net.graph)
    assert_same_network(torch_net, onnx_net, same_attrs=_momentum_in_float32)


def imports(name: str, folder) -> tuple[Net, Net]:
    """ZOO[name]'s model and minibatch imported by from_torch and from its ONNX export."""
    model, x, y = model_and_batch(name)
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    torch_net = Net(name, model, x, y, g, weights)
    g, weights = sw.from_onnx(export(copy.deepcopy(model).eval(), x, str(folder / f"{name}.onnx")))
    # the net's own name for its searched plans (Net.plan keeps them by name): not from_torch's graph
    return torch_net, Net(f"{name}-onnx", model, x, y, g, weights)


def assert_same_network(torch_net: Net, onnx_net: Net, same_attrs=_equal) -> None:
    """The two imports are one network and train alike (the module's docstring)."""
    assert_same_structure(torch_net.graph, onnx_net.graph, same_attrs)
    assert weight_positions(torch_net.graph, torch_net.weights) == weight_positions(onnx_net.graph, onnx_net.weights)
    counts = {k: v for k, v in torch_net.weights.items() if k.endswith(COUNT)}
    assert all(v == 0 for v in counts.values())   # a fresh model's: the trainer's first step count
    assert_bitwise_equal({k: v for k, v in torch_net.weights.items() if k not in counts}, onnx_net.weights,
                         "imported weights")

    for workers in WORKERS:
        plans = torch_net.plan(workers), onnx_net.plan(workers)
        for a, b in zip(torch_net.graph.ops, onnx_net.graph.ops):
            assert plans[0].configs[a.name] == plans[1].configs[b.name], \
                f"{workers} workers: {a.name!r} is split {plans[0].configs[a.name]}, {b.name!r} " \
                f"{plans[1].configs[b.name]}"
        for optimizer in OPTIMIZERS:
            (loss, after), (onnx_loss, onnx_after) = (one_step(net, plan, optimizer)
                                                      for net, plan in zip((torch_net, onnx_net), plans))
            what = f"{workers} workers, {optimizer}"
            assert np.isfinite(loss) and loss == onnx_loss, f"{what}: loss {loss!r} against {onnx_loss!r}"
            assert_bitwise_equal(after, onnx_after, f"{what}: weights after a step")


def _small_net(names: str = "", slope: float = 0.01, swap: bool = False, longer: bool = False) -> sw.Graph:
    g = sw.Graph()
    x = g.input("x", (2, 3, 8, 8))
    a, b = g.relu(x, name=f"{names}a"), g.leaky_relu(x, slope, name=f"{names}b")
    y = g.add(*((b, a) if swap else (a, b)), name=f"{names}sum")
    if longer:
        g.relu(y)
    return g


def test_the_comparison_sees_what_differs():
    assert_same_structure(_small_net(), _small_net(names="other."))   # the names aside
    with pytest.raises(AssertionError, match="attributes"):
        assert_same_structure(_small_net(), _small_net(slope=0.02))
    with pytest.raises(AssertionError, match="inputs from ops"):
        assert_same_structure(_small_net(), _small_net(swap=True))
    with pytest.raises(AssertionError, match="4 ops against 5"):
        assert_same_structure(_small_net(), _small_net(longer=True))
