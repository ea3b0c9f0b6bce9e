"""The model zoo: exact parameter counts (torchvision's), shapes, names, FLOPs, errors."""
import re

import pytest

import shardwise as sw
from shardwise import models
from shardwise.errors import GraphError, ShapeError

# torchvision's parameter counts (sum(p.numel() for p in model.parameters())).
PARAMS = {
    "lenet5": 61_706,
    "alexnet": 61_100_840,
    "vgg16": 138_357_544,
    "inception_v3": 23_834_568,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
}
DEFAULT_CLASSES = {name: 10 if name == "lenet5" else 1000 for name in PARAMS}
INPUT_HW = {"lenet5": (1, 32, 32), "inception_v3": (3, 299, 299)}


@pytest.fixture(scope="module")
def built():
    """Each zoo model built once at batch 2 with its default number of classes."""
    return {name: models.get(name, batch=2) for name in models.names()}


def test_zoo_lists_every_model():
    assert set(models.ZOO) == set(PARAMS)
    assert models.names() == sorted(PARAMS)
    for name in PARAMS:
        assert callable(models.ZOO[name])
        assert getattr(models, name) is models.ZOO[name]
        assert models.ZOO[name].__doc__ and "arameters" in models.ZOO[name].__doc__
    assert sw.models is models


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_parameter_counts(built, name):
    assert built[name].num_parameters() == PARAMS[name]


def test_inception_aux_head_parameters():
    g = models.inception_v3(batch=2, aux=True)
    assert g.num_parameters() == 27_161_264
    # the aux head: conv0 768*128 + bn 2*128, conv1 128*768*25 + bn 2*768, fc 768*1000 + 1000
    head = sum(op.desc.num_parameters() for op in g if op.name.startswith("AuxLogits."))
    assert head == 768 * 128 + 256 + 128 * 768 * 25 + 1536 + 768 * 1000 + 1000
    assert 27_161_264 - head == PARAMS["inception_v3"]
    assert g["AuxLogits.softmax"].shape == (2, 1000)
    assert g["AuxLogits.avgpool"].shape == (2, 768, 5, 5)
    assert g.ops[-1].name == "softmax" and g.ops[-1].shape == (2, 1000)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_input_and_output_shapes(built, name):
    g = built[name]
    assert g.ops[0].kind == "input"
    assert g.ops[0].shape == (2,) + INPUT_HW.get(name, (3, 224, 224))
    last = g.ops[-1]
    assert last.kind == "softmax"
    assert last.shape == (2, DEFAULT_CLASSES[name])


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_num_classes_and_batch_are_honoured(name):
    g = models.get(name, batch=3, num_classes=7)
    assert g.ops[0].shape[0] == 3
    assert g.ops[-1].shape == (3, 7)
    # only the classifier changes: its weight (7 x F) and bias (7)
    default = PARAMS[name]
    classes = DEFAULT_CLASSES[name]
    fc = g.ops[-2]
    assert fc.kind == "linear"
    features = fc.desc.inputs[0].shape[1]
    assert g.num_parameters() == default - (classes - 7) * (features + 1)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_op_names_are_unique_and_explicit(built, name):
    g = built[name]
    op_names = g.op_names()
    assert len(op_names) == len(set(op_names))
    # no op fell back to an automatic "<kind>_<k>" name
    for op in g:
        assert not re.fullmatch(rf"{op.kind}_\d+", op.name), op.name


def test_named_layers():
    vgg = models.vgg16(batch=1)
    convs = [op.name for op in vgg if op.kind == "conv2d"]
    assert convs == [f"conv{s}_{k}" for s, n in enumerate((2, 2, 3, 3, 3), 1) for k in range(1, n + 1)]
    assert [op.name for op in vgg if op.kind == "pool2d"] == [f"pool{s}" for s in range(1, 6)]
    assert [op.name for op in vgg if op.kind == "linear"] == ["fc6", "fc7", "fc8"]
    assert vgg.ops[-1].name == "prob"
    assert vgg["pool5"].shape == (1, 512, 7, 7)
    assert all(op.attrs["activation"] == "relu" for op in vgg if op.kind == "conv2d")
    assert vgg["fc8"].attrs["activation"] is None

    alex = models.alexnet(batch=1)
    assert alex["conv1"].shape == (1, 64, 55, 55)
    assert alex["pool5"].shape == (1, 256, 6, 6)
    assert [op.name for op in alex if op.kind == "linear"] == ["fc6", "fc7", "fc8"]

    lenet = models.lenet5(batch=1)
    assert lenet["pool2"].shape == (1, 16, 5, 5)
    assert lenet["flatten"].shape == (1, 400)

    inc = models.inception_v3(batch=1)
    assert inc["Mixed_5b.branch1x1.conv"].attrs["bias"] is False
    assert inc["Mixed_5b.concat"].shape == (1, 256, 35, 35)
    assert inc["Mixed_6a.concat"].shape == (1, 768, 17, 17)
    assert inc["Mixed_6b.branch7x7_2.conv"].attrs["kernel"] == (1, 7)
    assert inc["Mixed_6b.branch7x7_3.conv"].attrs["padding"] == (3, 0)
    assert inc["Mixed_7a.concat"].shape == (1, 1280, 8, 8)
    assert inc["Mixed_7c.concat"].shape == (1, 2048, 8, 8)
    assert inc["avgpool"].shape == (1, 2048, 1, 1)
    assert "AuxLogits.fc" not in inc

    r50 = models.resnet50(batch=1)
    assert r50["maxpool"].shape == (1, 64, 56, 56)
    assert r50["layer2.0.conv2"].attrs["stride"] == 2          # v1.5: stride on the 3x3
    assert r50["layer2.0.conv1"].attrs["stride"] == 1
    assert r50["layer1.0.downsample.0"].shape == (1, 256, 56, 56)
    assert "layer1.1.downsample.0" not in r50
    assert r50["layer4.2.relu"].shape == (1, 2048, 7, 7)
    assert r50["avgpool"].shape == (1, 2048, 1, 1)
    r18 = models.resnet18(batch=1)
    assert "layer1.0.downsample.0" not in r18
    assert r18["layer2.0.downsample.0"].shape == (1, 128, 28, 28)
    assert r18["layer4.1.add"].kind == "add"


def _gmacs(g):
    return g.flops() / 2 / 1e9


@pytest.mark.parametrize("name, gmacs", [
    ("resnet50", 4.09), ("vgg16", 15.47), ("alexnet", 0.71), ("resnet18", 1.81),
    ("resnet152", 11.51), ("inception_v3", 5.71)])
def test_flops_match_published_macs(name, gmacs):
    g = models.get(name, batch=1)
    assert g.flops() > 0
    assert _gmacs(g) == pytest.approx(gmacs, rel=0.10)


def test_flops_scale_with_batch(built):
    for name, g in built.items():
        assert g.flops() > 0
    one = models.resnet18(batch=1).flops()
    assert models.resnet18(batch=4).flops() == pytest.approx(4 * one, rel=1e-9)


def test_unknown_model_name():
    with pytest.raises(GraphError) as err:
        models.get("resnet51")
    for name in PARAMS:
        assert name in str(err.value)
    with pytest.raises(GraphError):
        models.get(None)


@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "8", None])
def test_bad_batch(name, bad):
    with pytest.raises(ShapeError, match="batch"):
        models.get(name, batch=bad)


@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("bad", [0, -5, 1.5, False])
def test_bad_num_classes(name, bad):
    with pytest.raises(ShapeError, match="num_classes"):
        models.get(name, num_classes=bad)


def test_bad_aux_and_unknown_kwarg():
    with pytest.raises(GraphError, match="aux"):
        models.inception_v3(aux="yes")
    with pytest.raises(TypeError):
        models.get("vgg16", depth=19)


def test_wide_resnets_match_seed_004_table_1():
    """Table 1 is weights + gradients + momentum in GiB: three times our float32 weights."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "tofu_models.py"
    spec = importlib.util.spec_from_file_location("tofu_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for depth, width, params, weights, triple, paper in mod.rows():
        assert triple == pytest.approx(paper, rel=0.03), (depth, width)
    g = sw.models.wide_resnet(152, 10, batch=1)
    assert g.num_parameters() * 4 / 2 ** 30 == pytest.approx(22, rel=0.02)   # "22GB for just its weights"
    with pytest.raises(sw.ShapeError):
        sw.models.wide_resnet(34, 4)
