"""A seeded fuzz test of sw.from_onnx: small valid models (written with onnx.helper: convolution,
pooling, batch norm, ReLU, linear layers, softmax, concatenation, reshapes and their shape
arithmetic, embeddings, layer norm, attention-like products, an LSTM) are mutated at random
(wrong attribute types and values, missing, extra and dangling inputs, wrong ranks and dtypes,
missing initializers, removed or reordered nodes, empty graphs) and each import either succeeds
or raises sw.ModelImportError, whose message says where (the node, the input, the initializer or
the model's output): never a raw TypeError, ValueError, IndexError, KeyError, AttributeError or
RecursionError from inside the importer.

The default run imports 3,000 mutants (a few seconds); ``-m slow`` 30,000 more.  Every mutant is a
function of its seed: a failure prints the seed and the mutations, and ``mutant(seed)`` rebuilds it.
"""
from __future__ import annotations

import random
import signal
import time
from typing import Any, Callable

import numpy as np
import pytest

import shardwise as sw

onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
from onnx import AttributeProto, TensorProto, helper, numpy_helper  # noqa: E402

N = 2


def _init(name: str, *shape: int, dtype=np.float32, value: Any = None) -> TensorProto:
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    arr = np.asarray(value, dtype=dtype) if value is not None else (rng.standard_normal(shape) * 0.3).astype(dtype)
    return numpy_helper.from_array(arr, name)


def _model(nodes, inputs, inits, outputs=("out",), opset=20) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "fuzz", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                      for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _x(shape, name="x", elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(shape))


def cnn() -> onnx.ModelProto:
    """Conv + BN + ReLU, pooling, a second Conv, global pooling, flatten, Gemm, Softmax."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "c1.weight", "c1.bias"], ["c1"], name="c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
               strides=[1, 1], dilations=[1, 1], group=1),
             n("BatchNormalization", ["c1", "bn.weight", "bn.bias", "bn.mean", "bn.var"], ["b1"], name="bn",
               epsilon=1e-5, momentum=0.9),
             n("Relu", ["b1"], ["r1"], name="relu1"),
             n("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p1", "c2.weight"], ["c2"], name="c2", kernel_shape=[3, 3], auto_pad="SAME_UPPER", group=2),
             n("AveragePool", ["c2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
             n("GlobalAveragePool", ["p2"], ["g"], name="gap"),
             n("Flatten", ["g"], ["f"], name="flat", axis=1),
             n("Gemm", ["f", "fc.weight", "fc.bias"], ["z"], name="fc", transB=1, alpha=1.0, beta=1.0),
             n("Softmax", ["z"], ["out"], name="softmax", axis=1)]
    inits = [_init("c1.weight", 4, 3, 3, 3), _init("c1.bias", 4), _init("bn.weight", 4), _init("bn.bias", 4),
             _init("bn.mean", 4), _init("bn.var", 4, value=np.ones(4)), _init("c2.weight", 6, 2, 3, 3),
             _init("fc.weight", 5, 6), _init("fc.bias", 5)]
    return _model(nodes, [_x((N, 3, 8, 8))], inits)


def mlp() -> onnx.ModelProto:
    """Linear layers three ways (Gemm, MatMul + Add, Transpose + MatMul), Concat, Reshape with
    the exporter's shape arithmetic (Shape, Gather, Unsqueeze, Concat), SiLU, Dropout."""
    n = helper.make_node
    nodes = [n("Gemm", ["x", "a.weight", "a.bias"], ["a"], name="a", transB=1),
             n("Relu", ["a"], ["ra"], name="relu_a"),
             n("MatMul", ["x", "b.weight"], ["bm"], name="b_mm"),
             n("Add", ["bm", "b.bias"], ["b"], name="b_add"),
             n("Sigmoid", ["b"], ["bs"], name="sig"),
             n("Mul", ["b", "bs"], ["silu"], name="silu"),
             n("Concat", ["ra", "silu"], ["cat"], name="cat", axis=1),
             n("Shape", ["cat"], ["shp"], name="shape"),
             n("Constant", [], ["zero"], name="const0", value=numpy_helper.from_array(np.array(0, np.int64))),
             n("Gather", ["shp", "zero"], ["n0"], name="gather0", axis=0),
             n("Unsqueeze", ["n0", "ax0"], ["n1"], name="unsq"),
             n("Constant", [], ["m1"], name="const_m1", value_ints=[-1]),
             n("Concat", ["n1", "m1"], ["tgt"], name="cat_shape", axis=0),
             n("Reshape", ["cat", "tgt"], ["flat"], name="reshape"),
             n("Dropout", ["flat"], ["d"], name="drop"),
             n("Transpose", ["c.weight"], ["cT"], name="tr", perm=[1, 0]),
             n("MatMul", ["d", "cT"], ["z"], name="c_mm"),
             n("LeakyRelu", ["z"], ["lz"], name="leaky", alpha=0.1),
             n("LogSoftmax", ["lz"], ["out"], name="logsoftmax", axis=-1)]
    inits = [_init("a.weight", 6, 5), _init("a.bias", 6), _init("b.weight", 5, 4), _init("b.bias", 4),
             _init("c.weight", 3, 10), _init("ax0", dtype=np.int64, value=[0])]
    return _model(nodes, [_x((N, 5))], inits)


def seq() -> onnx.ModelProto:
    """An embedding of token ids plus learned positions, layer norm, a self-attention product
    (MatMul of q by k's transpose, Softmax over the keys, MatMul by v), a linear head."""
    n = helper.make_node
    t, d = 4, 8
    nodes = [n("Gather", ["wte.weight", "ids"], ["tok"], name="wte", axis=0),
             n("Constant", [], ["pos"], name="const_pos", value=numpy_helper.from_array(np.arange(t, dtype=np.int64))),
             n("Gather", ["wpe.weight", "pos"], ["p"], name="wpe", axis=0),
             n("Add", ["tok", "p"], ["h"], name="add_pos"),
             n("LayerNormalization", ["h", "ln.weight", "ln.bias"], ["hn"], name="ln", axis=-1, epsilon=1e-5),
             n("Transpose", ["q.weight"], ["qT"], name="qT", perm=[1, 0]),
             n("MatMul", ["hn", "qT"], ["q"], name="q"),
             n("Transpose", ["hn"], ["kt"], name="kt", perm=[0, 2, 1]),
             n("MatMul", ["q", "kt"], ["s"], name="scores"),
             n("Softmax", ["s"], ["pr"], name="probs", axis=-1),
             n("MatMul", ["pr", "hn"], ["att"], name="att"),
             n("Gelu", ["att"], ["ge"], name="gelu", approximate="none"),
             n("Transpose", ["head.weight"], ["headT"], name="headT", perm=[1, 0]),
             n("MatMul", ["ge", "headT"], ["out"], name="head")]
    inits = [_init("wte.weight", 11, d), _init("wpe.weight", t, d), _init("ln.weight", d), _init("ln.bias", d),
             _init("q.weight", d, d), _init("head.weight", 11, d)]
    return _model(nodes, [_x((N, t), "ids", TensorProto.INT64)], inits)


def lstm() -> onnx.ModelProto:
    """nn.LSTM(batch_first=True) as PyTorch's exporter writes it, the last step, a linear head."""
    n = helper.make_node
    t, e, hid = 3, 4, 5
    nodes = [n("Transpose", ["x"], ["xt"], name="xt", perm=[1, 0, 2]),
             n("LSTM", ["xt", "W", "R", "B", "", "h0", "c0"], ["Y", "Yh", "Yc"], name="lstm", hidden_size=hid),
             n("Squeeze", ["Yh", "ax0"], ["h"], name="sq"),
             n("Gemm", ["h", "fc.weight", "fc.bias"], ["out"], name="fc", transB=1)]
    inits = [_init("W", 1, 4 * hid, e), _init("R", 1, 4 * hid, hid), _init("B", 1, 8 * hid),
             _init("h0", 1, N, hid, value=np.zeros((1, N, hid))), _init("c0", 1, N, hid, value=np.zeros((1, N, hid))),
             _init("fc.weight", 3, hid), _init("fc.bias", 3), _init("ax0", dtype=np.int64, value=[0])]
    return _model(nodes, [_x((N, t, e))], inits)


def misc() -> onnx.ModelProto:
    """Squeeze, ReduceMean, GlobalMaxPool, Tanh, Identity, Slice and Cast on constants, Expand."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "c.weight"], ["c"], name="c", kernel_shape=[1, 1]),
             n("Tanh", ["c"], ["t"], name="tanh"),
             n("Identity", ["t"], ["ti"], name="ident"),
             n("GlobalMaxPool", ["ti"], ["gm"], name="gmp"),
             n("ReduceMean", ["ti", "axes"], ["rm"], name="mean", keepdims=0),
             n("Squeeze", ["gm", "axes"], ["sq"], name="sq"),
             n("Concat", ["rm", "sq"], ["cat"], name="cat", axis=-1),
             n("Constant", [], ["st"], name="c_start", value_ints=[0]),
             n("Constant", [], ["en"], name="c_end", value_ints=[2]),
             n("Slice", ["shape4", "st", "en"], ["sl"], name="slice"),
             n("Cast", ["sl"], ["slc"], name="cast", to=TensorProto.INT64),
             n("Reshape", ["cat", "slc"], ["r"], name="reshape"),
             n("Gemm", ["r", "fc.weight"], ["out"], name="fc", transB=0)]
    inits = [_init("c.weight", 3, 2, 1, 1), _init("axes", dtype=np.int64, value=[2, 3]),
             _init("shape4", dtype=np.int64, value=[N, 6, 1, 1]), _init("fc.weight", 6, 4)]
    return _model(nodes, [_x((N, 2, 4, 4))], inits)


BASES: dict[str, Callable[[], onnx.ModelProto]] = {"cnn": cnn, "mlp": mlp, "seq": seq, "lstm": lstm, "misc": misc}
_BASE_BYTES = {k: f().SerializeToString() for k, f in BASES.items()}

ATTR_NAMES = ["axis", "axes", "perm", "strides", "pads", "kernel_shape", "dilations", "group", "epsilon",
              "momentum", "alpha", "beta", "transA", "transB", "keepdims", "auto_pad", "approximate", "to",
              "hidden_size", "direction", "layout", "activations", "ceil_mode", "count_include_pad", "allowzero",
              "start", "end", "upper", "value", "value_int", "value_ints", "value_float", "training_mode", "clip"]
OP_TYPES = ["Conv", "Gemm", "MatMul", "BatchNormalization", "Relu", "Sigmoid", "Tanh", "Gelu", "LeakyRelu", "Mul",
            "Add", "Concat", "Flatten", "Reshape", "Squeeze", "MaxPool", "AveragePool", "GlobalAveragePool",
            "GlobalMaxPool", "ReduceMean", "Softmax", "LogSoftmax", "Identity", "Dropout", "Gather",
            "LayerNormalization", "Transpose", "LSTM", "Shape", "Unsqueeze", "Cast", "CastLike", "Expand", "Slice",
            "Sub", "Div", "Range", "Sqrt", "Trilu", "Equal", "Where", "Constant", "Exp"]
HUGE = [2**31, 2**62, -2**62, 10**9, -(10**9)]


def _random_attr(rng: random.Random, name: str, like: Any = None) -> AttributeProto:
    """An attribute called ``name`` of a random type and value: ints where lists are expected and
    the other way round, strings, floats, negative and huge values, empty lists, tensors."""
    kind = rng.choice(["int", "ints", "float", "floats", "string", "strings", "tensor", "empty", "huge", "neg"])
    if kind == "int":
        return helper.make_attribute(name, rng.choice([0, 1, 2, 3, -1, -5, 7]))
    if kind == "ints":
        return helper.make_attribute(name, [rng.choice([0, 1, 2, -1, 3, 9]) for _ in range(rng.randint(1, 5))])
    if kind == "float":
        return helper.make_attribute(name, rng.choice([0.0, -1.5, 0.5, 1e30, float("nan"), float("inf")]))
    if kind == "floats":
        return helper.make_attribute(name, [rng.uniform(-2, 2) for _ in range(rng.randint(1, 4))])
    if kind == "string":
        return helper.make_attribute(name, rng.choice(["", "NOTSET", "SAME_LOWER", "VALID", "tanh", "bogus",
                                                       "forward", "\udcff".encode("utf-8", "surrogatepass")]))
    if kind == "strings":
        return helper.make_attribute(name, [rng.choice(["Sigmoid", "Tanh", "x"]) for _ in range(rng.randint(1, 3))])
    if kind == "tensor":
        arr = rng.choice([np.array(1, np.int64), np.array([1.5, 2], np.float32), np.zeros((2, 2), np.int32),
                          np.array([], np.int64), np.array(["a"], dtype=object)])
        return helper.make_attribute(name, numpy_helper.from_array(arr) if arr.dtype != object else
                                     helper.make_tensor(name, TensorProto.STRING, [1], [b"a"]))
    if kind == "empty":
        a = AttributeProto(name=name, type=rng.choice([AttributeProto.INTS, AttributeProto.FLOATS,
                                                       AttributeProto.STRINGS, AttributeProto.UNDEFINED]))
        return a
    if kind == "huge":
        v = rng.choice(HUGE)
        return helper.make_attribute(name, v if rng.random() < 0.5 else [v, v])
    return helper.make_attribute(name, rng.choice([-1, -2, -100]) if rng.random() < 0.5 else [-1, -3, -1, -3])


def _random_tensor(rng: random.Random, name: str) -> TensorProto:
    choice = rng.randrange(8)
    if choice == 0:
        return numpy_helper.from_array(np.array(rng.choice([0, -1, 2, 3]), np.int64), name)
    if choice == 1:
        return numpy_helper.from_array(np.ones([rng.randint(0, 3) for _ in range(rng.randint(0, 5))], np.float32), name)
    if choice == 2:
        return numpy_helper.from_array(np.array([True, False]), name)
    if choice == 3:
        return helper.make_tensor(name, TensorProto.STRING, [1], [b"weights"])
    if choice == 4:
        return numpy_helper.from_array(np.ones((2, 3), np.float16), name)
    if choice == 5:
        return numpy_helper.from_array(np.arange(6, dtype=np.int32).reshape(2, 3), name)
    if choice == 6:
        return numpy_helper.from_array(np.array([np.nan, np.inf, -np.inf], np.float64), name)
    return numpy_helper.from_array(np.zeros((0,), np.float32), name)


def _names(m: onnx.ModelProto) -> list[str]:
    g = m.graph
    out = [i.name for i in g.input] + [t.name for t in g.initializer]
    for nd in g.node:
        out += list(nd.output)
    return [o for o in out if o]


def mutate(m: onnx.ModelProto, rng: random.Random) -> str:
    """One random mutation of ``m`` in place; what it did, for messages."""
    g = m.graph
    nodes = list(g.node)
    what = rng.randrange(22)
    nd = rng.choice(nodes) if nodes else None
    if nd is None and what < 14:
        what = 14
    if what == 0 and nd.attribute:   # an attribute of another type or value
        k = rng.randrange(len(nd.attribute))
        a = nd.attribute[k]
        nd.attribute[k].CopyFrom(_random_attr(rng, a.name))
        return f"{nd.name}: attribute {a.name} -> {helper.printable_attribute(nd.attribute[k])[:60]}"
    if what in (0, 1):   # an extra attribute
        a = _random_attr(rng, rng.choice(ATTR_NAMES))
        for k, old in enumerate(nd.attribute):
            if old.name == a.name:
                del nd.attribute[k]
                break
        nd.attribute.append(a)
        return f"{nd.name}: attribute {helper.printable_attribute(a)[:60]}"
    if what == 2 and nd.attribute:
        k = rng.randrange(len(nd.attribute))
        name = nd.attribute[k].name
        del nd.attribute[k]
        return f"{nd.name}: attribute {name} removed"
    if what in (2, 3) and nd.input:   # an input removed
        k = rng.randrange(len(nd.input))
        name = nd.input[k]
        del nd.input[k]
        return f"{nd.name}: input {k} ({name}) removed"
    if what == 4:   # an extra input: an existing value, a dangling name, or the empty (omitted) one
        name = rng.choice(_names(m) + ["dangling", ""])
        nd.input.insert(rng.randint(0, len(nd.input)), name)
        return f"{nd.name}: input {name!r} inserted"
    if what == 5 and nd.input:   # an input replaced
        k = rng.randrange(len(nd.input))
        name = rng.choice(_names(m) + ["dangling", ""])
        nd.input[k] = name
        return f"{nd.name}: input {k} -> {name!r}"
    if what == 6:   # another op type
        old, nd.op_type = nd.op_type, rng.choice(OP_TYPES)
        return f"{nd.name}: {old} -> {nd.op_type}"
    if what == 7 and nd.output:
        k = rng.randrange(len(nd.output))
        old = nd.output[k]
        if rng.random() < 0.5:
            nd.output[k] = rng.choice(_names(m) + ["", "fresh"])
        else:
            del nd.output[k]
        return f"{nd.name}: output {k} ({old}) changed"
    if what == 8:   # a node removed
        k = rng.randrange(len(nodes))
        del g.node[k]
        return f"node {k} removed"
    if what == 9:   # a node duplicated or moved
        k, j = rng.randrange(len(nodes)), rng.randrange(len(nodes))
        copy = type(nd)()
        copy.CopyFrom(g.node[k])
        if rng.random() < 0.5:
            del g.node[k]
        g.node.insert(min(j, len(g.node)), copy)
        return f"node {k} duplicated/moved to {j}"
    if what == 10:
        nd.domain = rng.choice(["com.acme", "ai.onnx", "ai.onnx.ml"])
        return f"{nd.name}: domain {nd.domain}"
    if what == 11:
        nd.name = rng.choice(["", "x", nodes[0].name, "a/b/c", "/a/b/Conv"])
        return f"node renamed {nd.name!r}"
    if what == 12:   # scope metadata of PyTorch's exporters, malformed
        p = nd.metadata_props.add()
        p.key, p.value = rng.choice([("pkg.torch.onnx.name_scopes", "['', 'a', 'b']"),
                                     ("pkg.torch.onnx.name_scopes", "[1, 2"),
                                     ("pkg.torch.onnx.class_hierarchy", "['x']"),
                                     ("pkg.torch.onnx.stack_trace", 'File "/a/m.py", line 3\n  x\nFile "b'),
                                     ("pkg.torch.onnx.name_scopes", "[]")])
        return f"{nd.name}: metadata {p.key}={p.value!r}"
    if what == 13 and nd.op_type == "Constant":
        del nd.attribute[:]
        nd.attribute.append(rng.choice([helper.make_attribute("value", _random_tensor(rng, "v")),
                                        _random_attr(rng, rng.choice(["value", "value_int", "value_ints",
                                                                      "value_float", "value_floats", "bogus"]))]))
        return f"{nd.name}: Constant -> {nd.attribute[0].name}"
    if what in (13, 14) and g.initializer:   # an initializer replaced: wrong dtype, rank, values
        k = rng.randrange(len(g.initializer))
        name = g.initializer[k].name
        g.initializer[k].CopyFrom(_random_tensor(rng, name))
        return f"initializer {name} -> {numpy_helper.to_array(g.initializer[k]).shape}"
    if what == 15 and g.initializer:   # an initializer removed
        k = rng.randrange(len(g.initializer))
        name = g.initializer[k].name
        del g.initializer[k]
        return f"initializer {name} removed"
    if what == 16 and g.initializer:   # an initializer's bytes or dims broken
        t = g.initializer[rng.randrange(len(g.initializer))]
        how = rng.randrange(5)
        if how == 0:
            t.raw_data = t.raw_data[:len(t.raw_data) // 2 + 1]
        elif how == 1:
            t.dims.append(rng.choice([0, 2, 7]))
        elif how == 2:
            t.data_type = rng.choice([0, 8, 14, 16, 17, 99])
        elif how == 3:
            del t.dims[:]
            t.dims.extend([rng.choice([-1, 2**40, 3])])
        else:
            t.ClearField("raw_data")
        return f"initializer {t.name} broken ({how})"
    if what == 17:   # the graph input: element type, shape
        if not g.input:
            return "no input"
        vi = g.input[rng.randrange(len(g.input))]
        how = rng.randrange(5)
        tt = vi.type.tensor_type
        if how == 0:
            tt.elem_type = rng.choice([0, 2, 6, 7, 8, 9, 10, 11, 16, 99])
        elif how == 1:
            tt.shape.dim.add().dim_value = rng.choice([1, 3])
        elif how == 2 and tt.shape.dim:
            del tt.shape.dim[rng.randrange(len(tt.shape.dim))]
        elif how == 3 and tt.shape.dim:
            d = tt.shape.dim[rng.randrange(len(tt.shape.dim))]
            d.dim_value = rng.choice([0, 1, 2**31, 2**40]) if rng.random() < 0.7 else 0
            if d.dim_value == 0:
                d.dim_param = "N"
        else:
            vi.type.ClearField("tensor_type")
        return f"input {vi.name} type changed ({how})"
    if what == 18:   # outputs: none, two, a dangling one
        how = rng.randrange(3)
        if how == 0:
            del g.output[:]
        elif how == 1:
            g.output.append(helper.make_tensor_value_info(rng.choice(_names(m)), TensorProto.FLOAT, None))
        else:
            if not g.output:
                g.output.append(helper.make_tensor_value_info("out", TensorProto.FLOAT, None))
            g.output[0].name = rng.choice(_names(m) + ["dangling"])
        return f"outputs changed ({how})"
    if what == 19:   # empty graph, no inputs
        if rng.random() < 0.5:
            del g.node[:]
            return "empty graph"
        del g.input[:]
        return "no inputs"
    if what == 20:   # a node's input list shuffled
        if nd is not None:
            ins = list(nd.input)
            rng.shuffle(ins)
            del nd.input[:]
            nd.input.extend(ins)
        return f"{nd.name if nd else ''}: inputs shuffled"
    # a sparse initializer, an opset
    if rng.random() < 0.3:
        m.opset_import[0].version = rng.choice([1, 7, 11, 13, 99])
        return f"opset {m.opset_import[0].version}"
    if nd is not None and nd.input:
        nd.input.append(nd.input[0])
        return f"{nd.name}: input 0 read twice"
    return "nothing"


def mutant(seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """The mutant of ``seed``: a base model and one to three mutations."""
    rng = random.Random(seed)
    base = rng.choice(sorted(BASES))
    m = onnx.ModelProto()
    m.ParseFromString(_BASE_BYTES[base])
    done = [base]
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        done.append(mutate(m, rng))
    return m, done


WHERE = ("node '", "node #", "input '", "the initializer", "the model", "cannot read the initializer",
         "sparse initializers", "reads ")


class _Hang(BaseException):
    pass


def _hang(*_: Any) -> None:
    raise _Hang()


def check(seed: int) -> str:
    """Import the mutant of ``seed``: 'ok' or 'refused'; an AssertionError for anything else
    (an import that runs 20 s, where the unmutated models take milliseconds, is one too)."""
    m, done = mutant(seed)
    alarm = hasattr(signal, "SIGALRM")
    if alarm:
        previous = signal.signal(signal.SIGALRM, _hang)
        signal.alarm(20)
    try:
        sw.from_onnx(m)
    except _Hang:
        raise AssertionError(f"seed {seed} {done}: the import did not end within 20 s") from None
    except sw.ModelImportError as exc:
        msg = str(exc)
        assert msg.startswith(WHERE), f"seed {seed} {done}: the message does not say where: {msg}"
        return "refused"
    except Exception as exc:   # the failure the test looks for: reported with the seed
        raise AssertionError(f"seed {seed} {done}: {type(exc).__name__}: {exc}") from exc
    finally:
        if alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    return "ok"


def test_the_base_models_import():
    for name, make in BASES.items():
        g, w = sw.from_onnx(make())
        assert len(g.ops) > 3 and w, name


def _run(seeds: range) -> dict[str, int]:
    counts = {"ok": 0, "refused": 0}
    failures = []
    for s in seeds:
        try:
            counts[check(s)] += 1
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, f"{len(failures)} of {len(seeds)} mutants escaped:\n" + "\n".join(failures[:20])
    return counts


def test_mutated_models_raise_only_model_import_error():
    start = time.perf_counter()
    counts = _run(range(3000))
    assert counts["refused"] > 1500 and counts["ok"] > 150, counts   # the mutants reach the converters
    assert time.perf_counter() - start < 120


@pytest.mark.slow
def test_mutated_models_raise_only_model_import_error_thorough():
    counts = _run(range(3000, 33000))
    assert counts["refused"] > 15000 and counts["ok"] > 1500, counts


def _cnn_with(change: Callable[[onnx.ModelProto], None]) -> onnx.ModelProto:
    m = cnn()
    change(m)
    return m


def _set_attr(node_name: str, attr: AttributeProto) -> Callable[[onnx.ModelProto], None]:
    def change(m: onnx.ModelProto) -> None:
        nd = next(nd for nd in m.graph.node if nd.name == node_name)
        for k, a in enumerate(nd.attribute):
            if a.name == attr.name:
                del nd.attribute[k]
                break
        nd.attribute.append(attr)
    return change


def _matmul_with_one_input(m: onnx.ModelProto) -> None:
    nd = next(nd for nd in m.graph.node if nd.name == "fc")
    nd.op_type = "MatMul"
    del nd.input[1:]
    del nd.attribute[:]


@pytest.mark.parametrize("change, message", [
    (_set_attr("c1", helper.make_attribute("strides", 2)), "node 'c1' \\(Conv\\): attribute 'strides' is INT; "
                                                           "ONNX's Conv takes INTS"),
    (_set_attr("softmax", helper.make_attribute("axis", [1])), "node 'softmax' \\(Softmax\\): attribute 'axis' is "
                                                               "INTS; ONNX's Softmax takes INT"),
    (_matmul_with_one_input, "node 'fc' \\(MatMul\\): has 1 inputs; ONNX's MatMul takes 2"),
    (_set_attr("c1", helper.make_attribute("strides", [0, 1])), "node 'c1' \\(Conv\\): attribute strides=\\[0, 1\\] "
                                                                "is not supported"),
    (_set_attr("c1", helper.make_attribute("group", -2)), "node 'c1' \\(Conv\\): attribute group=-2"),
    (_set_attr("bn", helper.make_attribute("epsilon", float("nan"))), "node 'bn' .*epsilon=nan.*a finite number"),
    (_set_attr("c1", helper.make_attribute("pads", [2**40] * 4)), "node 'c1' .*pads"),
    (_set_attr("c1", helper.make_attribute("padding", [1, 1])), "ONNX's Conv has no attribute 'padding'"),
])
def test_the_issues_examples_name_the_node(change, message):
    """The escapes the issue names (Conv strides as an int, Softmax axis as a list, a MatMul with
    one input) and values out of range: a ModelImportError naming the node and the attribute."""
    with pytest.raises(sw.ModelImportError, match=message):
        sw.from_onnx(_cnn_with(change))
