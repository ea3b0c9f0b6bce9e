"""Real data: LeNet-5 on scikit-learn's digits with a searched plan on 4 workers.

scikit-learn is optional (it bundles the digits, so nothing is downloaded);
the tests that need it skip with the install command when it is absent.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

import shardwise as sw
from shardwise.train.data import load_digits, resize_bilinear

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples", "train_digits.py")
SKLEARN_MISSING = "scikit-learn not installed (it bundles the digits data set): pip install scikit-learn"


def need_sklearn() -> None:
    pytest.importorskip("sklearn", reason=SKLEARN_MISSING)


def load_example():
    spec = importlib.util.spec_from_file_location("train_digits_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_reaches_95_percent_with_a_searched_plan_on_4_workers(capsys):
    need_sklearn()
    example = load_example()
    accuracy = example.main(seed=0, progress=False)
    assert accuracy >= 0.95
    out = capsys.readouterr().out
    assert "test accuracy" in out and "on 4 workers" in out


def test_searched_plan_of_the_example_is_really_parallel():
    # the plan the example trains with splits work over several of the 4 workers
    g = sw.models.lenet5(batch=64)
    plan = sw.search(g, sw.DeviceGraph.cpu(4))
    used = {d for c in plan.configs.values() for d in c.devices}
    assert len(used) > 1


def test_digits_shapes_dtypes_and_split():
    need_sklearn()
    x_train, y_train, x_test, y_test = load_digits()
    assert x_train.shape == (1347, 1, 32, 32) and x_test.shape == (450, 1, 32, 32)
    assert x_train.dtype == np.float32 and x_test.dtype == np.float32
    assert y_train.dtype == np.int64 and y_test.dtype == np.int64
    assert x_train.flags.c_contiguous and x_test.flags.c_contiguous
    assert set(np.unique(y_train)) == set(range(10)) == set(np.unique(y_test))
    # stratified: every class has about a quarter of its samples in the test set
    counts = np.bincount(np.concatenate([y_train, y_test]), minlength=10)
    assert np.all(np.abs(np.bincount(y_test, minlength=10) - 0.25 * counts) <= 1)
    # standardized with the training set's statistics
    assert abs(float(x_train.mean())) < 1e-4 and abs(float(x_train.std()) - 1) < 1e-4
    assert abs(float(x_test.mean())) < 0.1
    assert np.isfinite(x_train).all() and np.isfinite(x_test).all()


def test_digits_are_deterministic_and_depend_on_the_seed():
    need_sklearn()
    a = load_digits(seed=3)
    b = load_digits(seed=3)
    c = load_digits(seed=4)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[1], c[1])


def test_digits_other_sizes_and_fractions():
    need_sklearn()
    x_train, y_train, x_test, y_test = load_digits(size=8, test_fraction=0.5)
    assert x_train.shape[1:] == (1, 8, 8)
    assert abs(len(x_test) - len(x_train)) <= 10 and len(x_train) + len(x_test) == 1797
    x_train, *_ = load_digits(size=16)
    assert x_train.shape[1:] == (1, 16, 16)
    with pytest.raises(sw.ConfigError):
        load_digits(size=0)
    with pytest.raises(sw.ConfigError):
        load_digits(test_fraction=1.0)


def test_missing_scikit_learn_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # makes `import sklearn...` raise ImportError
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match="pip install scikit-learn"):
        load_digits()


def test_resize_bilinear():
    rng = np.random.default_rng(0)
    # a constant image stays constant, a linear ramp stays a ramp, shapes follow
    np.testing.assert_allclose(resize_bilinear(np.full((2, 8, 8), 0.5), 32), 0.5)
    img = rng.random((3, 8, 8))
    big = resize_bilinear(img, 32)
    assert big.shape == (3, 32, 32)
    assert big.min() >= img.min() - 1e-12 and big.max() <= img.max() + 1e-12
    np.testing.assert_allclose(resize_bilinear(img, 8), img, atol=1e-12)  # same size: identity
    ramp = np.tile(np.arange(8.0), (8, 1))
    row = resize_bilinear(ramp, 16)[0]
    assert np.all(np.diff(row) >= 0)
    np.testing.assert_allclose(resize_bilinear(np.ones((4, 4)), 2), 1.0)  # downsizing works too
