"""Views: reshapes, transposes and indexing of a graph tensor that move its batch dimension,
kept lazy by :func:`shardwise.from_onnx` until a reader needs a graph tensor.

Exporters spell some layers through intermediate shapes the graph cannot hold: attention
sequence-first (``nn.MultiheadAttention``: the tokens in dimension 0, the batch merged with the
heads, ``(T, N, D) -> (T, N H, Dh) -> (N H, T, Dh) -> (N, H, T, Dh)``), the transpose of k
between reshapes, an LSTM's time-major output.  A :class:`View` records which element of its
``base`` tensor each of its elements is, two ways:

* strided: ``arr`` is the same chain of reshapes and transposes applied to ``origin``, an
  ``np.empty(base.shape, int8)`` that is never written (it costs address space only): its
  strides and offset say which element of ``base`` each element reads;
* indexed: where no strides can say it (a merge of the batch with the heads, ``(N, H, ..) ->
  (N H, ..)`` after a transpose), ``index`` holds the flat index into ``base`` of each
  element (int32 where that holds them), until a later reshape makes it strided again; the
  import drops it after its last reader.

A reader that needs a graph tensor gets one built from exact ops (:func:`materialize`): a
``reshape`` of the base exposing the view's axes, ``slice`` where it reads part of one, a
``permute`` to the view's order and a ``reshape`` to its shape; possible when the view keeps
the batch in dimension 0 and reads each element once.  A linear layer on a view that moves the
batch (:func:`linear_of_view`) runs on the rows gathered batch-first, and its result is the
same view of the linear's output.

Nothing here imports onnx.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from shardwise.errors import ModelImportError, ShardwiseError
from shardwise.graph import Graph, Tensor
from shardwise.importers.common import Lazy, unique_name

INDEX_LIMIT = 1 << 26
"""The most elements an indexed view may have (its index costs 4 or 8 bytes an element)."""


@dataclass(eq=False)
class View:
    """A view of ``base`` (see the module's docstring): ``arr`` a strided view of ``origin``, or,
    when ``index`` is given, the flat indices into ``base`` (and ``arr`` a zero-stride
    placeholder of the view's shape that shares no memory with ``origin``)."""

    base: Any         # a Tensor, or a lazy value (an LSTM's output steps, import_onnx_rnn)
    origin: np.ndarray
    arr: np.ndarray
    where: str = ""
    index: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.arr.shape)

    def __repr__(self) -> str:
        return (f"the view of a tensor of shape {self.base.shape} as {self.shape} (from {self.where}), which moves "
                f"the batch dimension")


def _show(value: Any) -> str:
    if isinstance(value, (Tensor, View)):
        return f"a tensor of shape {value.shape}" if isinstance(value, Tensor) else repr(value)
    return repr(value)


def same_layout(a: np.ndarray, b: np.ndarray) -> bool:
    """Do the arrays read the same elements in the same order (strides of length-1 axes aside)?"""
    return a.shape == b.shape and a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and all(
        s == t for s, t, n in zip(a.strides, b.strides, a.shape) if n > 1)


def resolve(v: View) -> Any:
    """``v``'s base when the view reads it unchanged (transposes undone: an LSTM's time-major
    output turned back to batch-first), else ``v``."""
    return v.base if v.index is None and same_layout(v.arr, v.origin) else v


def transposed_of(v: Any) -> Any:
    """The value ``v`` reads with its last two dimensions swapped, if that is what it reads."""
    if not isinstance(v, View) or v.index is not None:
        return None
    want = np.swapaxes(v.origin, -1, -2)
    same = v.arr.shape == want.shape and v.arr.strides == want.strides and \
        v.arr.__array_interface__["data"][0] == want.__array_interface__["data"][0]
    return v.base if same else None


def flat_index(v: View) -> np.ndarray:
    """The flat index into ``v.base`` of each element of ``v`` (int64, ``v``'s shape)."""
    if v.index is not None:
        return v.index
    offset = v.arr.__array_interface__["data"][0] - v.origin.__array_interface__["data"][0]
    out = np.full(v.arr.shape, offset, dtype=np.int64)
    for k, (n, s) in enumerate(zip(v.arr.shape, v.arr.strides)):   # int8: strides are element strides
        shape = [1] * v.arr.ndim
        shape[k] = n
        out += (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return out


def _affine(index: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """(offset, strides) when ``index`` is ``offset + sum(i_k * strides[k])``, else None."""
    if index.size == 0:
        return None
    first = (0,) * index.ndim
    offset = int(index[first])
    strides, rebuilt = [], np.full(index.shape, offset, dtype=np.int64)
    for k, n in enumerate(index.shape):
        s = int(index[tuple(1 if j == k else 0 for j in range(index.ndim))]) - offset if n > 1 else 0
        strides.append(s)
        shape = [1] * index.ndim
        shape[k] = n
        rebuilt += (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return (offset, tuple(strides)) if np.array_equal(rebuilt, index) else None


def from_index(base: Any, origin: np.ndarray, index: np.ndarray, where: str) -> Any:
    """The view of ``base`` whose elements are ``index`` (flat indices): strided where strides
    say it (then ``base`` itself if it reads it unchanged), else indexed."""
    found = _affine(index)
    if found is not None and min(found[1], default=0) >= 0:
        offset, strides = found
        arr = np.lib.stride_tricks.as_strided(origin.reshape(-1)[offset:], index.shape, strides, writeable=False)
        return resolve(View(base, origin, arr, where))
    if index.size > INDEX_LIMIT:
        raise ModelImportError(f"{where}: a view of {index.size:,} elements that no strides describe is not "
                               f"supported (at most {INDEX_LIMIT:,})")
    placeholder = np.broadcast_to(np.zeros((), np.int8), index.shape)
    small = origin.size < 2 ** 31   # 4 bytes an element where they hold every index
    return View(base, origin, placeholder, where, index.astype(np.int32 if small else np.int64, copy=False))


def take_view(where: str, x: Any, make: Callable[[np.ndarray], np.ndarray], what: str, g: Graph | None = None,
              name: str = "") -> Any:
    """The view ``make`` (reshapes, transposes, indexing) takes of ``x`` (a graph tensor, a view,
    or a lazy value with a shape: an LSTM's output steps), or its base when it reads that
    unchanged.  Where no strides describe the result, it is an indexed view, or, given the graph
    ``g``, the tensor :func:`materialize` builds of it where it can (MaxViT's windows regrouped
    as the image, whose grid partition is then a view of that tensor)."""
    base = x.base if isinstance(x, View) else x
    try:   # address space only, never written
        origin = x.origin if isinstance(x, View) else np.empty(x.shape, dtype=np.int8)
    except MemoryError:
        raise ModelImportError(f"{where}: {what} of {_show(x)} is not supported (the tensor is too large)") from None
    src = x.where if isinstance(x, View) else where
    if not (isinstance(x, View) and x.index is not None):
        arr = x.arr if isinstance(x, View) else origin
        out = make(arr)
        if not out.size or np.may_share_memory(out, origin):
            return resolve(View(base, origin, out, src))
        if arr.size > INDEX_LIMIT:   # NumPy had to copy: the view needs an index
            raise ModelImportError(f"{where}: {what} of {_show(x)} is not supported (no strides describe it and "
                                   f"the tensor has more than {INDEX_LIMIT:,} elements)")
        x = View(base, origin, arr, src, flat_index(View(base, origin, arr, src)))
    out = from_index(base, origin, make(x.index), src)
    if g is not None and isinstance(out, View) and out.index is not None and isinstance(base, Tensor) \
            and len(out.shape) <= MAX_RANK and out.shape[:1] == base.shape[:1]:
        try:   # no strides describe it: the tensor, if one can be built (MaxViT's windows regrouped as its grid)
            return materialize(g, out, name, where)
        except (ModelImportError, ShardwiseError):
            pass
    return out


# ----------------------------------------------------------------------------- graph tensors of views
def _axes(index: np.ndarray) -> tuple[int, list[tuple[int, int]]] | None:
    """(offset, [(size, stride), ...]) in row-major order with ``index`` = offset + the digits
    of the element's position in that mixed radix times the strides: each axis of ``index``
    refined into factors where it is not one stride (the heads and Dh of a merged (H Dh)
    axis), axes of size 1 left out; None when none is."""
    offset = int(index.reshape(-1)[0]) if index.size else 0
    axes: list[tuple[int, int]] = []
    for k, n in enumerate(index.shape):
        if n == 1:
            continue
        line = index[tuple(slice(None) if j == k else 0 for j in range(index.ndim))] - offset   # along axis k
        factors = _factor(line)
        if factors is None:
            return None
        axes.extend(factors)
    rebuilt = np.full(index.size, offset, dtype=np.int64)
    period = 1
    for n, s in reversed(axes):
        rebuilt += (np.arange(index.size, dtype=np.int64) // period % n) * s
        period *= n
    return (offset, axes) if np.array_equal(rebuilt, index.reshape(-1)) else None


def _factor(line: np.ndarray) -> list[tuple[int, int]] | None:
    """``line`` (starting at 0) as (size, stride) factors, outermost first, whose mixed-radix
    digits times the strides sum to it; None when it has none."""
    n = len(line)
    if n == 1:
        return []
    s = int(line[1])
    run = 1
    while run < n and int(line[run]) == run * s:
        run += 1
    for m in range(run, 1, -1):   # the longest run of one stride that tiles the line
        if n % m:
            continue
        blocks = line.reshape(-1, m)
        if np.array_equal(blocks - blocks[:, :1], np.broadcast_to(np.arange(m) * s, blocks.shape)):
            if m == n:
                return [(n, s)]
            outer = _factor(blocks[:, 0])
            return None if outer is None else outer + [(m, s)]
    return None


MAX_RANK = 5
"""The most dimensions a tensor of the runtime has."""


@dataclass
class _Container:
    """How a view reads its base: the base reshaped to (N, *dims), ``cuts`` [lo, hi) of each of
    those dimensions, and ``order``: the view's axes (``inner``, (size, stride)) by decreasing stride."""

    dims: list[int]
    cuts: list[tuple[int, int]]
    order: list[int]
    inner: list[tuple[int, int]]


def _container(index: np.ndarray, batch: int, sample: int) -> _Container | None:
    """The container of a view with these flat indices into a base of ``batch`` samples of
    ``sample`` elements, or None when the view does not keep the batch in dimension 0 and read
    each element once."""
    found = _axes(index)
    if found is None or not index.ndim or index.shape[0] != batch:
        return None
    offset, axes = found
    if offset >= sample or batch > 1 and (not axes or axes[0] != (batch, sample)):
        return None
    inner: list[tuple[int, int]] = []
    for n, s in (axes[1:] if batch > 1 else axes):   # axes the view reads as one (fewer dimensions)
        if inner and inner[-1][1] == n * s:
            inner[-1] = (inner[-1][0] * n, s)
        else:
            inner.append((n, s))
    # the view's axes by decreasing stride (the base's order), each a dimension of size (the next
    # larger stride) / stride, of which the view reads [digit, digit + size)
    order = sorted(range(len(inner)), key=lambda k: -inner[k][1])
    dims, cuts, above = [], [], sample
    for k in order:
        n, s = inner[k]
        if s < 1 or above % s:
            return None
        digit = offset % above // s
        if digit + n > above // s:
            return None
        dims.append(above // s)
        cuts.append((digit, digit + n))
        above = s
    if above > 1:   # below the smallest stride: one element of each run
        dims.append(above)
        cuts.append((offset % above, offset % above + 1))
    return _Container(dims, cuts, order, inner)


def materialize(g: Graph, v: View, name: str, where: str) -> Tensor:
    """``v`` as a graph tensor: a ``reshape`` of its base into a container whose dimensions are
    the view's axes in the base's order (each a whole dimension or a ``slice`` of one), the
    ``permute`` to the view's order and a ``reshape`` to its shape.  Where the container would
    have more dimensions than the runtime's 5 (MaxViT's window partition of (N, C, H, W) reads
    C innermost), the base is first permuted (the fewest dimensions).  The view must keep the
    batch in dimension 0 and read no element twice (else a ModelImportError)."""
    base = v.base
    if isinstance(base, Lazy):
        base = base.tensor(g, where, "the tensor a view reads")
    if not isinstance(base, Tensor):
        raise ModelImportError(f"{where}: {v!r} cannot be read as a tensor")
    batch = base.shape[0]
    sample = int(np.prod(base.shape[1:], dtype=np.int64))
    index = flat_index(v)
    box = _container(index, batch, sample)
    if box is None:
        raise ModelImportError(f"{where}: reading {v!r} as a tensor is not supported (only views that keep the batch "
                               f"in dimension 0 and read each element once)")
    unique = lambda label: unique_name(g, (), f"{name}.{label}")   # noqa: E731
    if len(box.dims) + 1 > MAX_RANK:
        best = None
        for perm in itertools.permutations(range(1, len(base.shape))):
            shape = (batch,) + tuple(base.shape[p] for p in perm)
            coords = np.unravel_index(index, base.shape)
            moved = np.ravel_multi_index(tuple(coords[p] for p in (0, *perm)), shape)
            other = _container(moved, batch, sample)
            if other is not None and (best is None or len(other.dims) < len(best[1].dims)):
                best = ((0, *perm), other)
        if best is not None and len(best[1].dims) < len(box.dims):
            base, box = g.permute(base, best[0], name=unique("base")), best[1]
    t = _reshape(g, base, (batch, *box.dims), unique("split"))
    for d, (lo, hi) in enumerate(box.cuts, 1):
        if (lo, hi) != (0, box.dims[d - 1]):
            t = g.slice(t, d, lo, hi, name=unique(f"slice{d}"))
    kept = (batch, *(hi - lo for lo, hi in box.cuts[:len(box.order)]))
    t = _reshape(g, t, kept, unique("axes"))   # drops the run dimension below the smallest stride
    perm = [0] + [1 + box.order.index(k) for k in range(len(box.inner))]
    if perm != list(range(len(perm))):
        t = g.permute(t, perm, name=unique("order"))
    return _reshape(g, t, v.shape, unique("view"))


def _reshape(g: Graph, x: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    """``x`` reshaped to ``shape`` (batch kept): one reshape where the builder takes it, else
    through the flat (N, features)."""
    shape = tuple(int(d) for d in shape)
    if shape == x.shape:
        return x
    try:
        return g.reshape(x, shape, name=name)
    except ShardwiseError:
        flat = g.reshape(x, (x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64))), name=f"{name}.flat")
        return flat if len(shape) == 2 else g.reshape(flat, shape, name=name)


def linear_of_view(g: Graph, v: View, name: str, where: str, linear: Callable[[Tensor], Tensor]) -> Any:
    """``linear`` (a layer on the last dimension) of the view ``v``: its rows gathered batch-first,
    in their order within each sample, as a graph tensor (N, R, D) (:func:`materialize`), the
    layer on that, and the same view of its rows of the result."""
    rows = flat_index(v).reshape(-1, v.shape[-1])
    base = v.base
    sample = int(np.prod(base.shape[1:], dtype=np.int64))
    batch = base.shape[0]
    which = rows[:, 0] // sample
    order = np.argsort(which, kind="stable")
    per = rows.shape[0] // batch
    if rows.shape[0] % batch or not np.array_equal(np.bincount(which, minlength=batch), np.full(batch, per)):
        raise ModelImportError(f"{where}: a linear layer on {v!r} is not supported (its rows are not the same "
                               f"number from each sample)")
    shape = (batch, per, v.shape[-1]) if per > 1 else (batch, v.shape[-1])
    gathered = from_index(base, v.origin, rows[order].reshape(shape), v.where)
    x = gathered if isinstance(gathered, Tensor) else materialize(g, gathered, name, where)
    y = linear(x)
    out = y.shape[-1]
    position = np.empty(len(order), dtype=np.int64)   # the row of y each row of v is
    position[order] = np.arange(len(order))
    index = (position[:, None] * out + np.arange(out)).reshape(v.shape[:-1] + (out,))
    return from_index(y, np.empty(y.shape, dtype=np.int8), index, v.where)


def split_batch(g: Graph, v: Any, name: str, where: str) -> tuple[Tensor, Callable[[Tensor], Any]]:
    """A tensor or view whose first dimension is the batch merged with k others (Swin's windows
    of every sample, (N nW, H, T, Dh)) as the tensor (N, k, ...) a batched op (a matmul, a
    softmax, a broadcast add) runs on, and how to merge its result back into a view (N k, ...)
    of it; for a tensor or view with the batch alone in front, the tensor and the identity."""
    if isinstance(v, Tensor):
        return v, lambda t: t
    base = v.base
    batch = base.shape[0]
    if v.shape and v.shape[0] == batch:
        return materialize(g, v, name, where), lambda t: t
    if not v.shape or v.shape[0] % batch:
        raise ModelImportError(f"{where}: {v!r} is not supported here (its first dimension is not a multiple of "
                               f"the batch)")
    k = v.shape[0] // batch
    split = take_view(where, v, lambda a: a.reshape((batch, k) + a.shape[1:]), "splitting the batch")
    t = split if isinstance(split, Tensor) else materialize(g, split, name, where)
    return t, lambda r: take_view(where, r, lambda a: a.reshape((batch * k,) + a.shape[2:]), "merging the batch")
