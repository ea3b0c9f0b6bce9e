"""Reading an ONNX model's initializers (and tensor attributes) for :func:`shardwise.from_onnx`.

A large model (PyTorch's exporters write GPT-2 small so: a 1 MiB ``model.onnx`` beside 623 MiB of
``model.onnx.data``) keeps its initializers in external files.  ``onnx.load`` reads each into
the protobuf message and handing the bytes back out copies them again, so the weights passed
through memory three times (about 1 s of GPT-2 small's import).  Here the model is loaded
without its external data, and each float32 initializer is read by one ``readinto`` straight
into its own NumPy array (one pass over the file, one copy in memory).  Other element types are
read the same way into bytes, then decoded by onnx's own reader.

External data is read by these rules, and only by them (onnx's resolver, which takes
``location`` relative to the working directory for a model held in memory, is never called):

* only for a model given by path: ``location`` is relative to that file's folder.  A model given
  as bytes or as a ModelProto has no folder, and a tensor of it with external data is refused;
* ``location`` is a relative path inside the folder: no absolute path, no ``..``, no link
  leading out of the folder, a regular file (not a device or a pipe);
* ``offset`` and ``length`` are non-negative integers within the file, and ``length`` (the rest
  of the file when absent) is exactly the bytes of the tensor's ``dims``.

Nothing here imports onnx: the module is handed in.
"""
from __future__ import annotations

import os
import stat
from typing import Any, BinaryIO

import numpy as np

from shardwise.errors import ModelImportError

NO_FOLDER = ("keeps its data in the external file {location!r}, but the model was given as {given}, which has no "
             "folder to read it from (external data is read only from the folder of a model given by path, so that "
             "no other file is read); pass the path of the .onnx file instead")


def tensor_array(onnx: Any, t: Any, base_dir: str | None, files: dict[str, BinaryIO], what: str,
                 given: str = "bytes or a ModelProto") -> np.ndarray:
    """The values of the TensorProto ``t`` (an initializer, a tensor attribute), ``what`` it is in
    messages (``"the initializer 'fc.weight'"``).

    Float32 raw data in the message: an array over the bytes protobuf hands out (its own copy);
    external data: read from ``base_dir`` (the model file's folder; None for a model given as
    bytes or a ModelProto: refused) by the rules above, the open files kept in ``files``
    (location -> file) for the next tensors; anything else by onnx's numpy_helper.  A tensor
    onnx cannot decode (an unknown element type, data that does not fill its dims) is a
    ModelImportError naming it."""
    external = t.data_location == onnx.TensorProto.EXTERNAL
    if t.HasField("segment"):
        raise ModelImportError(f"{what} is stored in segments, which are not supported")
    dims = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in dims):
        raise ModelImportError(f"{what} has negative dimensions {dims}")
    dtype = _dtype(onnx, t, what)
    if external:
        location = _entries(t, what).get("location", "")
        if base_dir is None:
            raise ModelImportError(f"{what} " + NO_FOLDER.format(location=location, given=given))
        raw = _read_external(t, dims, dtype, base_dir, files, what)
        if isinstance(raw, np.ndarray):
            return raw
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.data_location = onnx.TensorProto.DEFAULT
        del copy.external_data[:]
        copy.raw_data = raw
        t = copy
    elif t.data_type == onnx.TensorProto.FLOAT and np.little_endian and t.HasField("raw_data"):
        if len(t.raw_data) != 4 * _count(dims):
            raise ModelImportError(f"{what} of shape {dims} (float32, {4 * _count(dims)} bytes) has "
                                   f"{len(t.raw_data)} bytes of data")
        return np.frombuffer(t.raw_data, dtype=np.float32).reshape(dims)
    try:
        return onnx.numpy_helper.to_array(t)
    except (ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as exc:   # onnx's complaint
        raise ModelImportError(f"cannot read {what} ({type(exc).__name__}: {exc})") from None


def initializer_array(onnx: Any, t: Any, base_dir: str | None, files: dict[str, BinaryIO]) -> np.ndarray:
    """An initializer's values (:func:`tensor_array`)."""
    return tensor_array(onnx, t, base_dir, files, f"the initializer {t.name!r}")


def _count(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _dtype(onnx: Any, t: Any, what: str) -> Any:
    """The NumPy element type of ``t``; a ModelImportError for an unknown or undefined one."""
    try:
        if t.data_type == onnx.TensorProto.UNDEFINED:
            raise KeyError(0)
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
    except (KeyError, TypeError, ValueError):
        raise ModelImportError(f"{what} has the unknown element type {t.data_type}") from None


def _entries(t: Any, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in t.external_data:
        if e.key in out:
            raise ModelImportError(f"{what} gives its external data's {e.key!r} twice")
        out[e.key] = e.value
    return out


def _nonnegative(entries: dict[str, str], key: str, what: str) -> int | None:
    if key not in entries:
        return None
    try:
        value = int(entries[key])
    except ValueError:
        value = -1
    if value < 0:
        raise ModelImportError(f"{what} has the external data {key} {entries[key]!r}; it must be a non-negative "
                               f"integer")
    return value


def _read_external(t: Any, dims: tuple[int, ...], dtype: Any, base_dir: str, files: dict[str, BinaryIO],
                   what: str) -> np.ndarray | bytes:
    """``t``'s data from its external file: a new read-only array for float32, else the bytes
    (decoded by onnx).  ``length`` must be the bytes of ``dims`` values of ``dtype`` (for 4- and
    2-bit types, packed, as onnx writes them)."""
    entries = _entries(t, what)
    location = entries.get("location", "")
    offset = _nonnegative(entries, "offset", what) or 0
    length = _nonnegative(entries, "length", what)
    count = _count(dims)
    bits = {"int4": 4, "uint4": 4, "float4_e2m1": 4, "int2": 2, "uint2": 2}.get(dtype.name)
    if dtype.kind == "O" or dtype.name.startswith("str"):
        raise ModelImportError(f"{what} is a tensor of strings in an external file, which is not supported")
    nbytes = -(-count * bits // 8) if bits else count * dtype.itemsize
    f = files.get(location)
    if f is None:
        f = files[location] = _open(location, base_dir, what)
    size = os.fstat(f.fileno()).st_size
    if length is None:
        length = nbytes
    if length != nbytes:
        raise ModelImportError(f"{what} of shape {dims} ({dtype.name}, {nbytes} bytes) has external data of "
                               f"{length} bytes")
    if offset + length > size:
        raise ModelImportError(f"the external data of {what} (bytes {offset} to {offset + length} of {location!r}) "
                               f"lies beyond the file's {size} bytes")
    f.seek(offset)
    if dtype == np.float32 and np.little_endian:
        out = np.empty(dims, dtype=np.float32)
        got = f.readinto(memoryview(out.reshape(-1)).cast("B")) if length else 0
        out.flags.writeable = False
    else:
        data = f.read(length)
        got = len(data)
    if got != length:
        raise ModelImportError(f"reading the external data of {what} from {location!r} gave {got} of its "
                               f"{length} bytes")
    return out if dtype == np.float32 and np.little_endian else data


def _open(location: str, base_dir: str, what: str) -> BinaryIO:
    """The external data file ``location`` names, which must lie in ``base_dir`` (no absolute
    path, no ``..``, no link leading out: a model file must not read other files) and be a
    regular file."""
    root = os.path.realpath(base_dir)
    parts = location.replace("\\", "/").split("/")
    inside = bool(location) and "\0" not in location and not os.path.isabs(location) and ".." not in parts \
        and not os.path.splitdrive(location)[0] and not location.startswith(("/", "\\"))
    path = os.path.realpath(os.path.join(root, location)) if inside else ""
    if not inside or os.path.commonpath([root, path]) != root or path == root:
        raise ModelImportError(f"{what} names the external data file {location!r}, which is not inside the "
                               f"model's folder {base_dir!r} (external data must be a file in the model's folder or "
                               f"below it: no absolute path, no '..', no link leading out)")
    try:   # O_NONBLOCK: opening a pipe must not wait for a writer (it is then refused, not read)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise ModelImportError(f"cannot read the external data file {location!r} of {what} (in {base_dir!r}): "
                               f"{exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ModelImportError(f"the external data file {location!r} of {what} (in {base_dir!r}) is not a "
                               f"regular file")
    return os.fdopen(fd, "rb")
