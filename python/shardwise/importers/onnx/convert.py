"""Import an ONNX model: ``g, weights = sw.from_onnx("model.onnx")``.

The model is read with the ``onnx`` package and its nodes, in their (topological) order, are
mapped to shardwise ops by the table of :mod:`shardwise.importers.onnx.ops`; shape arithmetic on
constants is folded by :mod:`shardwise.importers.onnx.const`.  Weights come from the initializers,
in PyTorch's layouts, under the names :func:`shardwise.from_torch` gives them (docs/importing.md).

onnx is imported here only when :func:`from_onnx` is called: the package never needs it.
"""
from __future__ import annotations

import ast
import os
from typing import Any

import numpy as np

from shardwise.errors import ModelImportError, ShardwiseError
from shardwise.graph import Graph, Tensor
from shardwise.importers.onnx.const import FOLDERS, Const, FoldError, fold
from shardwise.importers.onnx.attrs import INT_LIMIT, Attrs, check_node, opset_version
from shardwise.importers.onnx.data import tensor_array
from shardwise.importers.onnx.views import View
from shardwise.importers.onnx.ops import (FUSES_RELU, HINTS, KIND_NAMES, LAZY_READERS, MULTI_OUTPUT, ONNX_OPS, OnnxCall,
                               Outputs, SiluOf)
from shardwise.importers.onnx import seq as import_onnx_seq# noqa: F401  (adds the sequence ops to ONNX_OPS)
from shardwise.importers.onnx import rnn as import_onnx_rnn# noqa: F401  (adds LSTM)
from shardwise.importers.onnx import bcast as import_onnx_bcast  # noqa: F401  (adds broadcasting Mul/Add, Expand, Slice, Split, Resize)
from shardwise.importers.onnx import groupnorm as import_onnx_groupnorm  # noqa: F401  (adds InstanceNormalization: group norm)
from shardwise.importers.onnx import windows as import_onnx_windows  # noqa: F401  (adds GatherND, Pad: Swin's windows)
from shardwise.importers.onnx import adaptive as import_onnx_adaptive  # noqa: F401  (adds Where, Div: adaptive pooling)
from shardwise.importers.common import Lazy, check_weight_shapes, unique_name, without_dead_ops

__all__ = ["from_onnx"]

_FLOAT_TYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}
_INT_TYPES = {6: "int32", 7: "int64"}   # token ids, which only embeddings (Gather of a table) read
_DEFAULT_DOMAINS = ("", "ai.onnx")


def _import_onnx() -> Any:
    try:
        import onnx
        import onnx.numpy_helper
    except ImportError as exc:
        raise ImportError("shardwise.from_onnx needs the onnx package, which is not installed: pip install onnx "
                          "(or pip install 'shardwise[onnx]')") from exc
    return onnx


def from_onnx(model: Any, batch: int | None = None, name: str | None = None) -> tuple[Graph, dict[str, np.ndarray]]:
    """Import an ONNX model as a shardwise graph and its weights.

    ``model`` is the path of an ``.onnx`` file, its bytes, or an ``onnx.ModelProto``.  The
    input shapes are the model's; ``batch`` sets a symbolic batch (first) dimension, which an
    export with dynamic axes has (it must equal a fixed one).  ``name`` is the graph's
    (default: the file's name without ``.onnx``, else the ONNX graph's name).

    The model must have one output of (N, classes) logits: a softmax op (shardwise's softmax
    cross-entropy loss) named ``"softmax"`` is appended, unless the output is a ``Softmax`` or
    ``LogSoftmax`` over the classes, which becomes the loss.  Weights are
    ``{"<op>.weight": array, "<op>.bias": array}`` in PyTorch's layouts, float32; an op whose
    weight initializer is named ``"<p>.weight"`` (a PyTorch export) is named ``"<p>"``, so the
    keys are the exported model's ``state_dict`` keys.  A Relu that alone reads a Conv, Gemm or
    linear MatMul is fused into it; ``Mul(x, Sigmoid(x))`` is one silu op.

    External data (tensors kept in other files) is read only for a model given by path, from
    files inside that file's folder (no absolute path, ``..`` or link leading out), at offsets
    and lengths within the file that match the tensor's size; a model given as bytes or as a
    ModelProto whose tensors use external data is refused (pass its path).

    Raises ImportError if onnx is missing and :class:`~shardwise.ModelImportError` (never another
    exception, for any malformed model) naming the node and its op type for an op or attribute
    shardwise does not support (the supported ops are listed in docs/importing.md), a node that
    does not fit ONNX's schema of its op, shapes that do not fit together, external data outside
    those rules, or a file that is not an ONNX model.
    """
    onnx = _import_onnx()
    proto, default_name, base_dir, given = _load(onnx, model)
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ModelImportError(f"batch must be a positive int, got {batch!r}")
    importer = _OnnxImporter(onnx, proto, batch, name or default_name, base_dir, given)
    g = importer.run()
    return without_dead_ops(g, importer.weights())   # the same pruning as from_torch: ops the loss does not read


def _fold_key(op: str, attrs: dict[str, Any], args: list[Any]) -> tuple | None:
    """What a folded value depends on, so that a constant every layer computes again (the
    dynamo exporter's causal mask: Expand, Trilu, Equal, Where on (T, T), in each of GPT-2
    small's 12 layers) is computed once: small inputs by value, large ones by identity (a
    value folded once is the same array for every reader).  None when not worth a key."""
    if op == "Constant":
        return None
    a = repr(sorted(attrs.items()))
    if len(a) > 200:
        return None
    parts: list[Any] = [op, a]
    for v in args:
        if isinstance(v, np.ndarray):
            parts.append((v.dtype.str, v.shape, v.tobytes()) if v.size <= 64 else ("id", id(v)))
        elif v is None or isinstance(v, tuple):   # an absent input, a Shape's tensor shape
            parts.append(v)
        else:
            return None
    return tuple(parts)


def _owner_name(initializer: str) -> str | None:
    """The op a weight initializer names: ``"layer1.0.conv1"`` for ``"layer1.0.conv1.weight"``,
    ``"w1"`` for a bare parameter ``"w1"`` (as from_torch names ``F.conv2d(x, self.w1)``); None
    for names the exporter made up (``onnx::Conv_27``), which say nothing of the model."""
    if initializer.startswith("onnx::") or not initializer:
        return None
    return initializer[:-len(".weight")] if initializer.endswith(".weight") else initializer


def _load(onnx: Any, model: Any) -> tuple[Any, str, str | None, str]:
    """The ModelProto, a default graph name, for a file its folder, where its external data
    lies (read by :func:`~shardwise.importers.onnx.data.tensor_array`, not by onnx.load; None
    for bytes and a ModelProto, whose external data is refused), and what the model was given as."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        try:
            proto = onnx.load(path, load_external_data=False)
        except OSError as exc:
            raise ModelImportError(f"cannot read the ONNX file {path!r}: {exc.strerror or exc}") from None
        except Exception as exc:   # protobuf's DecodeError, onnx's own: not an ONNX file
            raise ModelImportError(f"{path!r} is not an ONNX model ({type(exc).__name__}: {exc})") from None
        stem = os.path.basename(path)
        return proto, stem[:-5] if stem.lower().endswith(".onnx") else stem, os.path.dirname(path) or ".", "a path"
    if isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as exc:
            raise ModelImportError(f"the bytes are not an ONNX model ({type(exc).__name__}: {exc})") from None
        return proto, proto.graph.name or "onnx", None, "bytes"
    if isinstance(model, onnx.ModelProto):
        return model, model.graph.name or "onnx", None, "a ModelProto"
    raise ModelImportError(f"from_onnx takes the path of an .onnx file, its bytes or an onnx.ModelProto, got "
                           f"{type(model).__name__}")


class _OnnxImporter:
    """One pass over the ONNX graph's nodes, building a shardwise graph.

    ``env`` maps every ONNX value name to its value: a graph :class:`Tensor`, a :class:`Const`
    (an initializer or a folded constant), or a :class:`SiluOf` marker."""

    def __init__(self, onnx: Any, proto: Any, batch: int | None, name: str, base_dir: str | None = None,
                 given: str = "a ModelProto") -> None:
        self.onnx, self.proto, self.batch, self.base_dir, self.given = onnx, proto, batch, base_dir, given
        self.files: dict[str, Any] = {}   # external data files, open during the import
        self.gp = proto.graph
        self.opset = opset_version(onnx, proto)
        self.g = Graph(name)
        self.env: dict[str, Any] = {}
        self.consumers: dict[str, list[Any]] = {}
        for node in self.gp.node:
            for i in node.input:
                self.consumers.setdefault(i, []).append(node)
        self.outputs = {o.name for o in self.gp.output}
        self.fused: set[str] = set()                # outputs of nodes fused into their producer (ONNX is SSA)
        self.weights_: dict[str, dict[str, np.ndarray]] = {}
        self.owners: dict[str | None, tuple[str, str]] = {}
        self.parameter_ops: dict[str, Tensor] = {}
        self.sigmoid_of: dict[str, str] = {}        # a Sigmoid's output -> its input, where a SiLU Mul reads it
        self.state: dict[str, dict[str, np.ndarray]] = {}   # batch norms' running statistics
        # names that modules and weights own ("layer1.0.conv1"): an op of a function never takes one,
        # as in from_torch; and how many ops each TorchScript-export scope holds (see _scope)
        self.reserved = {_owner_name(t.name) for t in self.gp.initializer if _owner_name(t.name)}
        self.scope_ops: dict[str, int] = {}
        self.parsed_scopes: dict[tuple[str, str], Any] = {}
        self.folded: dict[tuple, tuple[np.ndarray, list[Any]]] = {}   # see _fold_key
        for node in self.gp.node:
            path, _ = self._scope(node, counted=False)
            if path:
                self.reserved.add(path)
                if node.op_type not in FOLDERS:
                    self.scope_ops[path] = self.scope_ops.get(path, 0) + 1
        self.parents = {p.rsplit(".", 1)[0] for p in self.scope_ops if "." in p}   # scopes with sub-scopes

    # ----- the pass
    def run(self) -> Graph:
        try:
            return self._run()
        finally:
            for f in self.files.values():
                f.close()

    def _tensor(self, t: Any, what: str) -> np.ndarray:
        return tensor_array(self.onnx, t, self.base_dir, self.files, what, self.given)

    def _run(self) -> Graph:
        if len(self.gp.sparse_initializer):
            raise ModelImportError("sparse initializers are not supported")
        for t in self.gp.initializer:
            self.env[t.name] = Const(self._tensor(t, f"the initializer {t.name!r}"), source=t.name)
        for vi in self.gp.input:
            if vi.name not in self.env:   # old exports list the initializers among the inputs too
                integer = vi.type.tensor_type.elem_type in _INT_TYPES
                shape = self._input_shape(vi)
                try:
                    self.env[vi.name] = self.g.input(self._unique(vi.name, owner=True), shape,
                                                     dtype="int64" if integer else "float32")
                except ShardwiseError as exc:   # a shape the graph cannot hold
                    raise ModelImportError(f"input {vi.name!r}: {exc}") from None
        unread = {name: len(readers) for name, readers in self.consumers.items()}
        for index, node in enumerate(self.gp.node):
            if not (node.output and node.output[0] in self.fused):
                try:
                    self._node(node, index)
                except ModelImportError:
                    raise
                except ShardwiseError as exc:   # a builder's ShapeError/GraphError: the model's, naming the node
                    where = self._where(node, index)
                    raise ModelImportError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
            for name in node.input:   # an indexed view's index (4 or 8 bytes an element) goes with its last reader
                unread[name] -= 1
                value = self.env.get(name)
                if not unread[name] and isinstance(value, View) and value.index is not None \
                        and name not in self.outputs:
                    del self.env[name]
        try:
            self._output()
        except ModelImportError:
            raise
        except ShardwiseError as exc:
            raise ModelImportError(f"the model's output: {exc}") from None
        return self.g

    def _input_shape(self, vi: Any) -> tuple[int, ...]:
        where = f"input {vi.name!r}"
        if not vi.type.HasField("tensor_type"):
            raise ModelImportError(f"{where} is not a tensor")
        tt = vi.type.tensor_type
        if tt.elem_type not in _FLOAT_TYPES and tt.elem_type not in _INT_TYPES:
            known = tt.elem_type in self.onnx.TensorProto.DataType.values()
            kind = self.onnx.TensorProto.DataType.Name(tt.elem_type) if tt.elem_type and known else \
                f"unknown ({tt.elem_type})"
            raise ModelImportError(f"{where} has element type {kind}; shardwise's inputs are float32")
        if not tt.HasField("shape"):
            raise ModelImportError(f"{where} has no shape")
        shape = []
        for k, d in enumerate(tt.shape.dim):
            fixed = d.HasField("dim_value") and d.dim_value > 0
            if k == 0:
                if not fixed and self.batch is None:
                    raise ModelImportError(f"{where} has a symbolic batch dimension {d.dim_param or '?'!r}; give "
                                           f"the batch size (from_onnx(..., batch=N), --batch N)")
                if fixed and self.batch is not None and d.dim_value != self.batch:
                    raise ModelImportError(f"{where} was exported with batch {d.dim_value}, not {self.batch}; export "
                                           f"it with a dynamic batch dimension to import it at another batch size")
                shape.append(d.dim_value if fixed else self.batch)
            elif not fixed:
                raise ModelImportError(f"{where} has the symbolic dimension {d.dim_param or '?'!r} at position {k}; "
                                       f"only the batch dimension may be symbolic")
            elif d.dim_value > INT_LIMIT:
                raise ModelImportError(f"{where} has the dimension {d.dim_value} at position {k}, more than the "
                                       f"{INT_LIMIT:,} supported")
            else:
                shape.append(d.dim_value)
        return tuple(shape)

    def _attrs(self, node: Any, where: str) -> Attrs:
        """The node's attributes decoded (their types checked by :func:`check_node` first)."""
        out = {}
        for a in node.attribute:
            if a.type == self.onnx.AttributeProto.TENSOR:   # read as initializers are (external data too)
                v = self._tensor(a.t, f"{where}: the tensor of its attribute {a.name!r}")
            else:
                v = self.onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                v = [s.decode("utf-8", "replace") for s in v]
            out[a.name] = v
        return Attrs(out, where)

    def _node(self, node: Any, index: int) -> None:
        where = self._where(node, index)
        if node.domain not in _DEFAULT_DOMAINS:
            raise ModelImportError(f"{where}: the op {node.domain}.{node.op_type} of a custom domain is not supported")
        values = []
        for i in node.input:
            if i and i not in self.env:
                raise ModelImportError(f"{where}: reads {i!r}, which no node before it computes")
            values.append(self.env[i] if i else None)
        if node.op_type in ONNX_OPS or node.op_type in FOLDERS:
            check_node(self.onnx, node, self.opset, where)
        attrs = self._attrs(node, where)
        if self._fold(node, values, attrs, where):
            return
        if node.op_type not in LAZY_READERS:   # an LSTM's output steps read whole: build the sequence
            for k, v in enumerate(values):
                if isinstance(v, Lazy) and not self._folds(v, node, k):
                    values[k] = self.env[node.input[k]] = v.tensor(self.g, where, f"its input {k}")
        if node.op_type == "Sigmoid" and self._silu_sigmoid(node):
            self.sigmoid_of[node.output[0]] = node.input[0]
            if not self._other_readers(node):   # read by its SiLU Muls only: no sigmoid op
                self.env[node.output[0]] = SiluOf(values[0])
                return
        if node.op_type == "Mul":   # Mul(x, Sigmoid(x)): give the Mul the SiLU's input
            for k, i in enumerate(node.input):
                if i in self.sigmoid_of and self.sigmoid_of[i] in node.input:
                    values[k] = SiluOf(self.env[self.sigmoid_of[i]])
        convert = ONNX_OPS.get(node.op_type)
        if convert is None:
            hint = f"; {HINTS[node.op_type]}" if node.op_type in HINTS else ""
            raise ModelImportError(f"{where}: the ONNX op {node.op_type} is not supported (the supported ops are "
                                   f"listed in docs/importing.md){hint}")
        for k, extra in enumerate(node.output[1:], 1):   # BN's running statistics, MaxPool's indices, masks
            if extra and node.op_type not in MULTI_OUTPUT and (self.consumers.get(extra) or extra in self.outputs):
                raise ModelImportError(f"{where}: reading its output {k} ({extra!r}) is not supported")
        bias_add = self._bias_add(node) if node.op_type == "MatMul" else None
        last = bias_add or node   # the node whose output the op's result is
        relu = self._relu_reader(last) if node.op_type in FUSES_RELU and (node.op_type != "MatMul" or bias_add) \
            else None
        linear = bias_add is not None or (node.op_type == "MatMul" and len(values) == 2
                                          and isinstance(values[1], Const) and values[1].transposed)
        call = OnnxCall(self.g, self._op_name(node, values, linear), where, node.op_type, values, attrs,
                        activation="relu" if relu is not None else None,
                        is_output=self._only_output(node.output[0]),
                        bias_add=self.env[self._other_input(bias_add, node.output[0])] if bias_add else None,
                        weights=self.weights_, owners=self.owners, parameter_op=self._parameter_op,
                        state=self.state)
        value = convert(call)
        if isinstance(value, Outputs):   # an LSTM's Y, Y_h, Y_c
            for out, v in zip(node.output, value):
                if out:
                    self.env[out] = v
            return
        for n in (node, bias_add, relu):
            if n is not None:
                self.env[n.output[0]] = value
                self.fused.add(n.output[0])

    def _fold(self, node: Any, values: list[Any], attrs: dict[str, Any], where: str) -> bool:
        """Evaluate a node of constants (and Shape of a tensor); True when it was one."""
        op = node.op_type
        if op == "Shape" and values and isinstance(values[0], Const):   # of a weight
            args: list[Any] = [values[0].value.shape]
        elif op == "Shape" and values and isinstance(getattr(values[0], "shape", None), tuple):
            args = [values[0].shape]   # of a tensor, or a lazy value (a view, an LSTM's steps)
        elif op == "CastLike" and len(values) == 2 and isinstance(values[0], Const) and \
                isinstance(values[1], (Tensor, View, Lazy)):
            args = [values[0].value, np.zeros(0, np.float32)]   # graph tensors (and lazy values) are float32
        elif op in FOLDERS and all(v is None or isinstance(v, Const) for v in values):
            if op == "Identity":   # the same initializer under another name: keep it one Const
                self.env[node.output[0]] = values[0]
                return True
            w = values[0] if values else None
            if op == "Gather" and w is not None and w.source is not None and w.value.dtype.kind == "f":
                return False   # a table of the model read by constant indices: positions (import_onnx_seq)
            if op in ("Expand", "Slice") and w is not None and w.source is not None and w.value.dtype.kind == "f":
                return False   # a learned table expanded or sliced (a class token): a parameter op (import_onnx_bcast)
            if op == "Transpose" and w is not None and w.source is not None and w.value.ndim == 2:
                if list(attrs.get_ints("perm", [1, 0])) == [0, 1]:   # the identity (Swin's table)
                    self.env[node.output[0]] = w
                    return True
                # a linear layer's weight (out, in) transposed for a MatMul: still that initializer
                self.env[node.output[0]] = Const(w.value.T, source=w.source, transposed=True)
                return True
            args = [None if v is None else v.value for v in values]
        else:
            return False
        key = _fold_key(op, attrs, args)
        done = self.folded.get(key) if key is not None else None
        if done is None:
            try:
                done = (fold(op, attrs, args), args)   # args kept alive: their ids are in the key
            except FoldError as exc:
                raise ModelImportError(f"{where}: {exc}") from None
            if key is not None:
                done[0].flags.writeable = False   # shared by every node that computes it
                self.folded[key] = done
        self.env[node.output[0]] = Const(done[0])
        return True

    def _output(self) -> None:
        outs = list(self.gp.output)
        if len(outs) != 1:
            raise ModelImportError(f"the model has {len(outs)} outputs ({', '.join(o.name for o in outs)}); from_onnx "
                                   f"takes a model with one (N, classes) output of logits")
        value = self.env.get(outs[0].name)
        if isinstance(value, Lazy):
            value = value.tensor(self.g, f"the model's output {outs[0].name!r}", "the output")
        if not isinstance(value, Tensor):
            raise ModelImportError(f"the model's output {outs[0].name!r} is not computed from its inputs")
        if len(value.shape) not in (2, 3):
            raise ModelImportError(f"the model's output {outs[0].name!r} has shape {value.shape}; from_onnx takes a "
                                   f"model whose output is (N, classes) or (N, T, classes) logits")
        if self.g.ops[value.op].kind != "softmax":
            self.g.softmax(value, name=self._unique("softmax"))

    # ----- fusions
    def _only_output(self, value: str) -> bool:
        return value in self.outputs and not self.consumers.get(value)

    def _single_reader(self, node: Any, op_type: str) -> Any:
        """The node of type ``op_type`` that alone reads ``node``'s first output, else None."""
        out = node.output[0]
        readers = self.consumers.get(out, [])
        if out in self.outputs or len(readers) != 1 or readers[0].op_type != op_type \
                or readers[0].domain not in _DEFAULT_DOMAINS or not readers[0].output or not readers[0].output[0]:
            return None   # (a reader without an output is not fused: it is refused when its turn comes)
        return readers[0]

    def _folds(self, v: Lazy, node: Any, k: int) -> bool:
        """Does ``node`` take the lazy value ``v``, its input ``k``, as it is: an op type ``v`` folds
        into, its only reader (a group norm's pattern, :mod:`.groupnorm`)?"""
        name = node.input[k]
        return node.op_type in v.folds_into and name not in self.outputs and \
            (v.shared or len(self.consumers.get(name, [])) == 1)

    def _relu_reader(self, node: Any) -> Any:
        relu = self._single_reader(node, "Relu")
        return relu if relu is not None and relu.input[0] == node.output[0] else None

    @staticmethod
    def _other_input(node: Any, value: str) -> str:
        return node.input[1] if node.input[0] == value else node.input[0]

    def _bias_add(self, node: Any) -> Any:
        """The Add of a bias initializer that alone reads a MatMul by a weight initializer: the
        two are one linear layer (exporters other than PyTorch's write Linear that way)."""
        if len(node.input) != 2 or not isinstance(self.env.get(node.input[0]), (Tensor, View)):
            return None
        w = self.env.get(node.input[1])
        if not (isinstance(w, Const) and w.source is not None and w.value.ndim == 2):
            return None
        add = self._single_reader(node, "Add")
        if add is None or len(add.input) != 2:
            return None
        b = self.env.get(self._other_input(add, node.output[0]))
        ok = isinstance(b, Const) and b.source is not None and b.value.size == w.value.shape[1] and b.value.ndim <= 2
        return add if ok else None

    def _is_silu_mul(self, node: Any, sigmoid: Any) -> bool:
        return node.op_type == "Mul" and sorted(node.input) == sorted([sigmoid.input[0], sigmoid.output[0]])

    def _silu_sigmoid(self, node: Any) -> bool:
        """Does a ``Mul(x, Sigmoid(x))`` (SiLU as exporters spell it) read this Sigmoid?"""
        return isinstance(self.env.get(node.input[0]), Tensor) and any(
            self._is_silu_mul(r, node) for r in self.consumers.get(node.output[0], []))

    def _other_readers(self, node: Any) -> bool:
        """Is this Sigmoid read by anything but SiLU Muls (a sigmoid op is then built too)?"""
        return node.output[0] in self.outputs or any(
            not self._is_silu_mul(r, node) for r in self.consumers.get(node.output[0], []))

    def _parameter_op(self, const: Const, where: str) -> Tensor:
        """An initializer read as a MatMul operand: one ``parameter`` op per initializer."""
        assert const.source is not None
        src = const.source
        if src not in self.parameter_ops:
            op = self._unique(_owner_name(src) or src, owner=True)
            owner = self.owners.get(src)
            if owner is not None:
                raise ModelImportError(f"{where}: the initializer {src!r} is also the {owner[1]} of op {owner[0]!r}; "
                                       f"shared (tied) weights are not supported")
            self.owners[src] = (op, "weight")
            self.weights_[op] = {"weight": const.value}
            self.parameter_ops[src] = self.g.parameter(tuple(const.value.shape), name=op)
            if "::" not in src:   # the model's own name (not an exporter's "onnx::MatMul_12"): the weights keep it
                self.g.weight_names[f"{op}.weight"] = src
        return self.parameter_ops[src]

    # ----- weights
    def weights(self) -> dict[str, np.ndarray]:
        # the initializers' arrays are the import's own copies: no second copy unless transposed or converted
        out = {f"{op}.{p}": np.ascontiguousarray(v, dtype=np.float32) for op, ps in self.weights_.items()
               for p, v in ps.items()}
        check_weight_shapes(self.g, out)
        for op, buffers in self.state.items():   # running statistics: Trainer.set_weights takes them too
            out.update({f"{op}.{b}": np.array(v, dtype=np.float32, order="C") for b, v in buffers.items()})
        return out

    # ----- names and places
    def _unique(self, base: str, owner: bool = False) -> str:
        """``base``, or ``base_1``, ...: a name no op has; a reserved name only for its owner."""
        return unique_name(self.g, self.reserved, base, owner)

    def _scope(self, node: Any, counted: bool = True) -> tuple[str | None, bool]:
        """(module path, whether the node is that module's own op) from what PyTorch's exporters
        record; (None, False) for other producers.

        The dynamo exporter records name scopes and module classes, which tell a ``torch.nn``
        module (an op of its own, like a from_torch module call) from a user's module (whose
        functions make ops named ``<path>.<op>``).  The TorchScript exporter (``dynamo=False``)
        names nodes ``/layer1/layer1.0/conv1/Conv`` without classes: a scope without sub-scopes
        that holds one op is taken for a module's own, as ``torch.nn``'s leaf modules are
        (``counted``: once :attr:`scope_ops` is known)."""
        meta = {p.key: p.value for p in getattr(node, "metadata_props", [])}
        if "pkg.torch.onnx.name_scopes" in meta:
            key = (meta["pkg.torch.onnx.name_scopes"], meta.get("pkg.torch.onnx.class_hierarchy", "[]"))
            if key not in self.parsed_scopes:   # parsed once: every node is asked about several times
                try:
                    self.parsed_scopes[key] = (ast.literal_eval(key[0]), ast.literal_eval(key[1]))
                except (ValueError, SyntaxError):
                    self.parsed_scopes[key] = None
            if self.parsed_scopes[key] is None:
                return None, False
            scopes, classes = self.parsed_scopes[key]
            if len(scopes) < 3:
                return "", False
            leaf = len(classes) == len(scopes) and str(classes[-2]).startswith("torch.nn.modules.")
            return str(scopes[-2]), leaf
        if node.name.startswith("/"):
            path = ""
            for seg in node.name.split("/")[1:-1]:
                path = seg if not path or seg.startswith(path + ".") else f"{path}.{seg}"
            return path, counted and bool(path) and self.scope_ops.get(path, 0) == 1 and path not in self.parents
        return None, False

    def _op_name(self, node: Any, values: list[Any], linear: bool) -> str:
        """The op's name by docs/importing.md's rules: the weight's owner, else the module path."""
        if node.op_type == "LSTM":   # the prefix of its ops' names: the module (each layer a node), or the node
            path, _ = self._scope(node)
            return path or node.name or "lstm"
        kind = "linear" if linear else KIND_NAMES.get(node.op_type, node.op_type.lower())
        weighted = node.op_type in ("Conv", "Gemm", "BatchNormalization", "LayerNormalization", "Gather",
                                    "InstanceNormalization") or linear
        w = values[0 if node.op_type == "Gather" else 1] if weighted and len(values) > 1 else None
        if isinstance(w, Const) and w.source is not None and _owner_name(w.source):
            return self._unique(_owner_name(w.source), owner=True)
        path, leaf = self._scope(node)
        if path and (leaf or weighted):
            return self._unique(path, owner=True)
        if path is not None:
            return self._unique(f"{path}.{kind}" if path else kind)
        return self._unique(node.name or kind)

    def _where(self, node: Any, index: int) -> str:
        """``node 'name' (Op, module 'path', model.py:12 `code`)`` for messages."""
        parts = [node.op_type]
        path, _ = self._scope(node)
        if path:
            parts.append(f"module {path!r}")
        meta = {p.key: p.value for p in getattr(node, "metadata_props", [])}
        trace = meta.get("pkg.torch.onnx.stack_trace", "")
        lines = trace.splitlines()
        for k in range(len(lines) - 1, -1, -1):   # the innermost frame outside torch
            text = lines[k].strip()
            if text.startswith('File "') and text.find('"', 6) > 0 and f"{os.sep}torch{os.sep}" not in text:
                file = os.path.basename(text[6:text.index('"', 6)])
                lineno = text.split(", line ")[1].split(",")[0] if ", line " in text else "?"
                code = lines[k + 1].strip() if k + 1 < len(lines) else ""
                parts.append(f"{file}:{lineno} `{code}`" if code else f"{file}:{lineno}")
                break
        label = f"node {node.name!r}" if node.name else f"node #{index}"
        return f"{label} ({', '.join(parts)})"
