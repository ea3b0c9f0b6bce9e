"""sw.from_onnx on models whose initializers lie in external data files (as PyTorch's exporters
write large models): the weights are the values written (float32 read straight from the file,
other types through onnx's reader), read-only, the same as from the model held in memory; a
data file outside the model's folder, missing, too short or of the wrong length is a
ModelImportError naming the initializer or the file."""
from __future__ import annotations

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
