"""Reading an ONNX model's initializers for :func:`shardwise.from_onnx`.

A large model (PyTorch's exporters write GPT-2 small so: a 1 MiB ``model.onnx`` beside 623 MiB of
``model.onnx.data``) keeps its initializers in external files.  ``onnx.load`` reads each into
the protobuf message and handing the bytes back out copies them again, so the weights passed
through memory three times (about 1 s of GPT-2 small's import).  Here the model is loaded
without its external data, and each float32 initializer is read by one ``readinto`` straight
into its own NumPy array (one pass over the file, one copy in memory).  Other element types go
through onnx's own reader.

Nothing here imports onnx: the module is handed in.
"""
from __future__ import annotations

import os
from typing import Any, BinaryIO

import numpy as np

from shardwise.errors import ModelImportError


def initializer_array(onnx: Any, t: Any, base_dir: str | None, files: dict[str, BinaryIO]) -> np.ndarray:
    """An initializer's values.

    Float32 raw data in the message: an array over the bytes protobuf hands out (its own copy);
    float32 external data: read from ``base_dir`` (the model file's folder) into a new read-only
    array, the open files kept in ``files`` (location -> file) for the next initializers; anything else
    by onnx's numpy_helper."""
    external = t.data_location == onnx.TensorProto.EXTERNAL
    if t.data_type == onnx.TensorProto.FLOAT and np.little_endian:
        if external and base_dir is not None:
            return _read_external(onnx, t, base_dir, files)
        if not external and t.HasField("raw_data"):
            return np.frombuffer(t.raw_data, dtype=np.float32).reshape(tuple(t.dims))
    if external and base_dir is not None:
        onnx.external_data_helper.load_external_data_for_tensor(t, base_dir)
    return onnx.numpy_helper.to_array(t)


def _read_external(onnx: Any, t: Any, base_dir: str, files: dict[str, BinaryIO]) -> np.ndarray:
    """``t``'s float32 data from its external file: ``location`` relative to ``base_dir`` and
    inside it, ``offset`` and ``length`` (when given) within the file, ``length`` the bytes of
    ``dims`` float32 values."""
    info = onnx.external_data_helper.ExternalDataInfo(t)
    shape = tuple(int(d) for d in t.dims)
    out = np.empty(shape, dtype=np.float32)
    f = files.get(info.location)
    if f is None:
        f = files[info.location] = _open(info.location, base_dir, t.name)
    offset = int(info.offset or 0)
    length = out.nbytes if info.length is None else int(info.length)
    size = os.fstat(f.fileno()).st_size
    if length != out.nbytes:
        raise ModelImportError(f"the initializer {t.name!r} of shape {shape} (float32, {out.nbytes} bytes) has "
                               f"external data of {length} bytes")
    if offset < 0 or offset + length > size:
        raise ModelImportError(f"the external data of the initializer {t.name!r} (bytes {offset} to {offset + length}"
                               f" of {info.location!r}) lies beyond the file's {size} bytes")
    f.seek(offset)
    view = memoryview(out.reshape(-1)).cast("B")
    got = f.readinto(view) if length else 0
    if got != length:
        raise ModelImportError(f"reading the external data of the initializer {t.name!r} from {info.location!r} "
                               f"gave {got} of its {length} bytes")
    out.flags.writeable = False
    return out


def _open(location: str, base_dir: str, tensor: str) -> BinaryIO:
    """The external data file ``location`` names, which must lie in ``base_dir`` (no absolute
    path, no ``..``, no link leading out: a model file must not read other files)."""
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.isabs(location) or ".." in location.replace("\\", "/").split("/") or \
            os.path.commonpath([root, path]) != root:
        raise ModelImportError(f"the initializer {tensor!r} names the external data file {location!r}, which is not "
                               f"inside the model's folder {base_dir!r}")
    try:
        return open(path, "rb")
    except OSError as exc:
        raise ModelImportError(f"cannot read the external data file {location!r} of the initializer {tensor!r} "
                               f"(in {base_dir!r}): {exc.strerror or exc}") from None
