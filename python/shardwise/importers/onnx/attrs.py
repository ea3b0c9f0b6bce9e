"""A node's attributes and inputs, checked before a converter or a folder reads them.

* :func:`check_node`: the node against ONNX's own schema of its op (at the model's opset):
  the number of inputs, the attribute names and their declared types (``strides`` given as one
  int instead of a list, ``axis`` as a list), required attributes.  A malformed node is a
  :class:`~shardwise.ModelImportError` naming it, never an IndexError in a converter.
* :class:`Attrs`: the decoded attributes, read by type where they are read (``a.get_int("group",
  1, lo=1)``, ``a.get_ints("strides", [1, 1], length=2, lo=1)``): the value's type and range
  checked in one place, a ModelImportError naming the node and the attribute otherwise.

Nothing here imports onnx: the module is handed in.
"""
from __future__ import annotations

import math
from typing import Any

from shardwise.errors import ModelImportError

INT_LIMIT = 2**31 - 1
"""The largest magnitude of an integer attribute: sizes, strides, axes and paddings of any real
model are far smaller, and the graph builders take them as C integers."""

_MISSING = object()


class Attrs(dict):
    """A node's decoded attributes (``{name: value}``; strings decoded, tensors as arrays),
    read by type: each ``get_*`` returns the default for an absent attribute and raises a
    ModelImportError naming the node (``where``) for a value of another type or out of range."""

    def __init__(self, values: dict[str, Any], where: str) -> None:
        super().__init__(values)
        self.where = where

    def error(self, key: str, want: str) -> ModelImportError:
        return ModelImportError(f"{self.where}: attribute {key}={self[key]!r} is not supported ({want})")

    @staticmethod
    def _is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def get_int(self, key: str, default: Any = None, *, lo: int = -INT_LIMIT, hi: int = INT_LIMIT) -> Any:
        """An ``int`` attribute in [lo, hi]."""
        if key not in self:
            return default
        v = self[key]
        if not self._is_int(v) or not lo <= v <= hi:
            raise self.error(key, f"an integer from {lo} to {hi}")
        return v

    def get_ints(self, key: str, default: Any = None, *, length: int | None = None, lo: int = -INT_LIMIT,
                 hi: int = INT_LIMIT) -> Any:
        """An ``ints`` attribute (a list), of ``length`` values when given, each in [lo, hi]."""
        if key not in self:
            return default
        v = self[key]
        if not isinstance(v, list) or not all(self._is_int(x) and lo <= x <= hi for x in v) or \
                (length is not None and len(v) != length):
            size = f"{length} " if length is not None else ""
            raise self.error(key, f"a list of {size}integers from {lo} to {hi}")
        return list(v)

    def get_float(self, key: str, default: Any = None) -> Any:
        """A finite ``float`` attribute."""
        if key not in self:
            return default
        v = self[key]
        if not isinstance(v, (float, int)) or isinstance(v, bool) or not math.isfinite(v):
            raise self.error(key, "a finite number")
        return float(v)

    def get_str(self, key: str, default: Any = None) -> Any:
        """A ``string`` attribute."""
        if key not in self:
            return default
        if not isinstance(self[key], str):
            raise self.error(key, "a string")
        return self[key]

    def get_strs(self, key: str, default: Any = None) -> Any:
        """A ``strings`` attribute (a list of strings)."""
        if key not in self:
            return default
        v = self[key]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.error(key, "a list of strings")
        return list(v)


def opset_version(onnx: Any, proto: Any) -> int:
    """The model's version of the default ONNX domain (the newest onnx knows when absent or unknown)."""
    newest = onnx.defs.onnx_opset_version()
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx") and 1 <= o.version <= newest:
            return int(o.version)
    return newest


def check_node(onnx: Any, node: Any, opset: int, where: str) -> None:
    """``node`` against ONNX's schema of its op at ``opset`` (the newest schema when the op is
    newer than the opset; nothing for an op onnx does not define, which the importer refuses
    by its own table): its input count, attribute names, types and required attributes."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        try:
            schema = onnx.defs.get_schema(node.op_type, "")
        except onnx.defs.SchemaError:
            return
    n = len(node.input)
    while n and not node.input[n - 1]:   # trailing omitted optional inputs
        n -= 1
    if not schema.min_input <= n <= schema.max_input:
        want = f"{schema.min_input}" if schema.min_input == schema.max_input else \
            f"{schema.min_input} to {schema.max_input}"
        raise ModelImportError(f"{where}: has {n} inputs; ONNX's {node.op_type} takes {want}")
    for k in range(min(n, len(schema.inputs))):   # a required (non-optional) input may not be omitted
        p = schema.inputs[k]
        if not node.input[k] and p.option == onnx.defs.OpSchema.FormalParameterOption.Single:
            raise ModelImportError(f"{where}: its input {k} ({p.name}) is required but omitted")
    if len(node.output) < 1 or not node.output[0]:
        raise ModelImportError(f"{where}: has no output")
    seen = set()
    for a in node.attribute:
        if a.name in seen:
            raise ModelImportError(f"{where}: gives the attribute {a.name!r} twice")
        seen.add(a.name)
        spec = schema.attributes.get(a.name)
        if spec is None:
            raise ModelImportError(f"{where}: ONNX's {node.op_type} has no attribute {a.name!r}")
        if a.ref_attr_name or a.type != int(spec.type):
            got = onnx.AttributeProto.AttributeType.Name(a.type) if a.type in \
                onnx.AttributeProto.AttributeType.values() else str(a.type)
            want = onnx.AttributeProto.AttributeType.Name(int(spec.type))
            raise ModelImportError(f"{where}: attribute {a.name!r} is {got}; ONNX's {node.op_type} takes {want}")
    for name, spec in schema.attributes.items():
        if spec.required and name not in seen:
            raise ModelImportError(f"{where}: the required attribute {name!r} is missing")
