"""sw.from_onnx on models whose initializers lie in external data files (as PyTorch's exporters
write large models): the weights are the values written (float32 read straight from the file,
other types through onnx's reader), read-only, the same as from the model held in memory; a
data file outside the model's folder, missing, too short or of the wrong length is a
ModelImportError naming the initializer or the file."""
from __future__ import annotations

import builtins
import os

import numpy as np
import pytest

import shardwise as sw

onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

N = 4
RNG = np.random.default_rng(0)
VALUES = {"fc1.weight": RNG.standard_normal((6, 5)).astype(np.float32),
          "fc1.bias": RNG.standard_normal(6).astype(np.float32),
          "shape": np.array([N, 6], dtype=np.int64),   # not float32: read by onnx's own reader
          "fc2.weight": RNG.standard_normal((3, 6)).astype(np.float32),
          "fc2.bias": RNG.standard_normal(3).astype(np.float32)}


def model() -> onnx.ModelProto:
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["s"], name="same"),
             helper.make_node("Gemm", ["s", "fc2.weight", "fc2.bias"], ["out"], name="fc2", transB=1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, 5])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in VALUES.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def save(tmp_path, one_file: bool = True) -> str:
    path = str(tmp_path / "mlp.onnx")
    onnx.save_model(model(), path, save_as_external_data=True, all_tensors_to_one_file=one_file,
                    location="mlp.onnx.data" if one_file else None, size_threshold=0)
    return path


def numpy_forward(x: np.ndarray) -> np.ndarray:
    h = np.maximum(x @ VALUES["fc1.weight"].T + VALUES["fc1.bias"], 0)
    z = h @ VALUES["fc2.weight"].T + VALUES["fc2.bias"]
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("one_file", [True, False])
def test_external_data_is_read(tmp_path, one_file):
    path = save(tmp_path, one_file)
    assert all(t.data_location == TensorProto.EXTERNAL for t in onnx.load(path, load_external_data=False)
               .graph.initializer)
    g, w = sw.from_onnx(path)
    _, w_memory = sw.from_onnx(model())
    assert sorted(w) == sorted(w_memory) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    for k, v in w.items():
        np.testing.assert_array_equal(v, VALUES[k])
        assert v.dtype == np.float32 and not v.flags.writeable
    t = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}))
    t.set_weights(w)
    x = RNG.standard_normal((N, 5)).astype(np.float32)
    np.testing.assert_allclose(t.predict(x), numpy_forward(x.astype(np.float64)), atol=1e-5, rtol=0)


def _set_external(path: str, name: str, **fields: str) -> None:
    """Rewrite the external data entries (location, offset, length) of one initializer."""
    m = onnx.load(path, load_external_data=False)
    t = next(t for t in m.graph.initializer if t.name == name)
    for entry in t.external_data:
        if entry.key in fields:
            entry.value = fields.pop(entry.key)
    for k, v in fields.items():
        t.external_data.add(key=k, value=v)
    onnx.save_model(m, path)


def test_data_outside_the_models_folder_is_refused(tmp_path):
    (tmp_path / "inner").mkdir()
    path = save(tmp_path / "inner")
    os.replace(tmp_path / "inner" / "mlp.onnx.data", tmp_path / "outside.data")
    _set_external(path, "fc1.weight", location="../outside.data")
    with pytest.raises(sw.ModelImportError, match="'fc1.weight'.*'../outside.data'.*not inside"):
        sw.from_onnx(path)


def test_missing_data_file_is_refused(tmp_path):
    path = save(tmp_path)
    os.remove(tmp_path / "mlp.onnx.data")
    with pytest.raises(sw.ModelImportError, match="cannot read the external data file 'mlp.onnx.data'"):
        sw.from_onnx(path)


def test_short_data_file_is_refused(tmp_path):
    path = save(tmp_path)
    data = tmp_path / "mlp.onnx.data"
    data.write_bytes(data.read_bytes()[:40])
    with pytest.raises(sw.ModelImportError, match="initializer 'fc1.weight'.*beyond the file's 40 bytes"):
        sw.from_onnx(path)


def test_wrong_length_is_refused(tmp_path):
    path = save(tmp_path)
    _set_external(path, "fc1.weight", length="8")
    with pytest.raises(sw.ModelImportError, match=r"'fc1.weight' of shape \(6, 5\) \(float32, 120 bytes\) has "
                                                  r"external data of 8 bytes"):
        sw.from_onnx(path)


# ----------------------------------------------------------------------------- what may be read
# External data is read only from the folder of a model given by path, and only inside it: a
# model must never read (and hand back as weights) a file the user did not name.
SECRET = b"API_KEY=sk-live-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n" * 2


def _pointing_at(location: str, length: int = 120, name: str = "fc1.weight") -> onnx.ModelProto:
    """model() with ``name`` (float32 (6, 5), 120 bytes) in the external file ``location``."""
    m = model()
    t = next(t for t in m.graph.initializer if t.name == name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    t.external_data.add(key="offset", value="0")
    t.external_data.add(key="length", value=str(length))
    return m


def _record_opens(monkeypatch) -> list[str]:
    """The paths os.open and open are asked for from now on (onnx's own reader uses open)."""
    opened: list[str] = []
    real_os_open, real_open = os.open, builtins.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: (opened.append(str(p)), real_os_open(p, *a, **k))[1])
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: (opened.append(str(p)), real_open(p, *a, **k))[1])
    return opened


def test_env_file_above_the_models_folder_is_never_read(tmp_path, monkeypatch):
    """The exfiltration of the issue: a model in tmp_path/a/ whose weights point at tmp_path/.env,
    by a '..' path, an absolute path, and a link inside the folder leading out."""
    (tmp_path / ".env").write_bytes(SECRET)
    (tmp_path / "a").mkdir()
    opened = _record_opens(monkeypatch)
    cases = {"../.env": "not inside", str(tmp_path / ".env"): "not inside", "link.env": "not inside",
             "sub/../../.env": "not inside"}
    os.symlink(tmp_path / ".env", tmp_path / "a" / "link.env")
    for location, message in cases.items():
        path = tmp_path / "a" / "m.onnx"
        onnx.save_model(_pointing_at(location), str(path))
        with pytest.raises(sw.ModelImportError, match=f"'fc1.weight'.*{message}"):
            sw.from_onnx(str(path))
    assert not any(p.endswith(".env") for p in opened), opened


def test_bytes_or_a_model_proto_with_external_data_is_refused(tmp_path, monkeypatch):
    """A model given as bytes or a ModelProto has no folder: its external data (here a file of
    the working directory) is refused, saying why and to pass the path, and nothing is opened."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_bytes(SECRET)
    (tmp_path / "weights.bin").write_bytes(np.zeros(30, np.float32).tobytes())
    opened = _record_opens(monkeypatch)
    for location in (".env", "weights.bin", str(tmp_path / ".env")):
        m = _pointing_at(location)
        for given, what in ((m, "a ModelProto"), (m.SerializeToString(), "bytes")):
            with pytest.raises(sw.ModelImportError) as info:
                sw.from_onnx(given)
            msg = str(info.value)
            assert "'fc1.weight'" in msg and repr(location) in msg and f"given as {what}" in msg, msg
            assert "pass the path of the .onnx file" in msg, msg
    assert opened == [], opened


def test_data_inside_the_folder_and_below_it_is_read(tmp_path):
    """A relative location in the folder, in a subfolder, or through a link that stays inside."""
    w = VALUES["fc1.weight"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(w.tobytes())
    os.symlink(tmp_path / "sub" / "w.bin", tmp_path / "inside.bin")
    for location in ("sub/w.bin", "./sub/w.bin", "inside.bin"):
        path = str(tmp_path / "m.onnx")
        onnx.save_model(_pointing_at(location), path)
        _, weights = sw.from_onnx(path)
        np.testing.assert_array_equal(weights["fc1.weight"], w)


@pytest.mark.parametrize("fields, message", [
    ({"offset": "-8"}, "offset '-8'.*non-negative integer"),
    ({"offset": "abc"}, "offset 'abc'.*non-negative integer"),
    ({"length": "-1"}, "length '-1'.*non-negative integer"),
    ({"length": "1e3"}, "length '1e3'.*non-negative integer"),
    ({"offset": "200"}, "bytes 200 to 320 .*beyond the file's"),
    ({"offset": str(2**62)}, "beyond the file's"),
    ({"length": "124"}, r"\(float32, 120 bytes\) has external data of 124 bytes"),
    ({"location": ""}, "not inside"),
    ({"location": "sub"}, "not a regular file|cannot read"),
    ({"location": "nul\0.bin"}, "not inside"),
])
def test_bad_external_data_entries_are_refused(tmp_path, fields, message):
    (tmp_path / "sub").mkdir()
    path = save(tmp_path)
    _set_external(path, "fc1.weight", **fields)
    with pytest.raises(sw.ModelImportError, match=message):
        sw.from_onnx(path)


def test_other_element_types_are_checked_too(tmp_path):
    """The int64 initializer 'shape' (read through onnx's decoder) obeys the same rules."""
    path = save(tmp_path)
    _set_external(path, "shape", length="8")
    with pytest.raises(sw.ModelImportError, match=r"'shape' of shape \(2,\) \(int64, 16 bytes\) has external data "
                                                  r"of 8 bytes"):
        sw.from_onnx(path)
    path = save(tmp_path)
    _set_external(path, "shape", location="../x.bin")
    with pytest.raises(sw.ModelImportError, match="'shape'.*not inside"):
        sw.from_onnx(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_pipe_is_not_read(tmp_path):
    path = save(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    _set_external(path, "fc1.weight", location="pipe")
    with pytest.raises(sw.ModelImportError, match="'pipe'.*not a regular file"):
        sw.from_onnx(path)


def test_a_constant_attribute_with_external_data_obeys_the_rules(tmp_path, monkeypatch):
    """A Constant node's tensor kept in an external file: refused for a model in memory (not
    resolved against the working directory), read from the model's folder for a path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shape.bin").write_bytes(np.array([N, 6], np.int64).tobytes())
    m = model()
    del m.graph.initializer[2]   # 'shape' becomes a Constant node's external tensor
    t = TensorProto(name="shape", data_type=TensorProto.INT64, dims=[2], data_location=TensorProto.EXTERNAL)
    t.external_data.add(key="location", value="shape.bin")
    m.graph.node.insert(0, helper.make_node("Constant", [], ["shape"], name="const_shape", value=t))
    with pytest.raises(sw.ModelImportError, match="node 'const_shape'.*'value'.*given as a ModelProto.*pass the "
                                                  "path"):
        sw.from_onnx(m)
    onnx.save_model(m, str(tmp_path / "m.onnx"))
    g, _ = sw.from_onnx(str(tmp_path / "m.onnx"))
    assert "fc2" in g
