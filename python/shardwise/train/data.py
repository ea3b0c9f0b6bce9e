"""Small real data sets for examples and tests.

    from shardwise.train.data import load_digits
    x_train, y_train, x_test, y_test = load_digits(size=32)

The digits come with scikit-learn (1,797 handwritten digits, 8x8 pixels, 16
grey levels), bundled inside the scikit-learn package: nothing is downloaded.
scikit-learn is an optional dependency of shardwise (``pip install
scikit-learn``); everything else here is NumPy.
"""
from __future__ import annotations

import numpy as np

from shardwise.errors import ConfigError

__all__ = ["load_digits", "resize_bilinear"]


def _interpolation_matrix(src: int, dst: int) -> np.ndarray:
    """(dst, src) matrix of bilinear weights with half-pixel centres (align_corners=False),
    the convention of PyTorch's ``interpolate(mode="bilinear")`` and of OpenCV."""
    m = np.zeros((dst, src), np.float64)
    scale = src / dst
    for i in range(dst):
        x = (i + 0.5) * scale - 0.5
        x = min(max(x, 0.0), src - 1.0)
        lo = int(np.floor(x))
        hi = min(lo + 1, src - 1)
        frac = x - lo
        m[i, lo] += 1.0 - frac
        m[i, hi] += frac
    return m


def resize_bilinear(images: np.ndarray, size: int) -> np.ndarray:
    """Resize (..., H, W) images to (..., size, size) by bilinear interpolation (NumPy only)."""
    images = np.asarray(images, dtype=np.float64)
    h, w = images.shape[-2:]
    rows = _interpolation_matrix(h, size)
    cols = _interpolation_matrix(w, size)
    return rows @ images @ cols.T


def load_digits(size: int = 32, test_fraction: float = 0.25, seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits, resized to ``size`` x ``size`` and split into train and test sets.

    Returns ``(x_train, y_train, x_test, y_test)``: images of shape
    ``(n, 1, size, size)`` in float32, labels in int64 (0..9).  Pixels are
    scaled to [0, 1], resized bilinearly, then standardized with the mean and
    standard deviation of the training images (one scalar each, so the test set
    sees the same transform).  The split is stratified: every class puts
    ``round(test_fraction * count)`` of its samples, chosen by ``seed``, in the
    test set; both sets are then shuffled by ``seed``.  The result depends only
    on the arguments.
    """
    try:
        from sklearn.datasets import load_digits as _sk_load_digits
    except ImportError:
        raise ImportError("shardwise.train.data.load_digits needs scikit-learn, which bundles the digits data set: "
                          "pip install scikit-learn") from None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"size must be a positive int, got {size!r}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) \
            or not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction!r}")

    bunch = _sk_load_digits()
    images = np.asarray(bunch.images, dtype=np.float64) / 16.0  # 16 grey levels -> [0, 1]
    labels = np.asarray(bunch.target, dtype=np.int64)
    if size != images.shape[-1] or size != images.shape[-2]:
        images = resize_bilinear(images, size)

    rng = np.random.default_rng(seed)
    train_idx, test_idx = [], []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        members = members[rng.permutation(len(members))]
        k = int(round(test_fraction * len(members)))
        k = min(max(k, 1), len(members) - 1)
        test_idx.append(members[:k])
        train_idx.append(members[k:])
    train = np.concatenate(train_idx)
    test = np.concatenate(test_idx)
    train = train[rng.permutation(len(train))]
    test = test[rng.permutation(len(test))]

    mean = images[train].mean()
    std = images[train].std()
    images = (images - mean) / std

    def pack(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.ascontiguousarray(images[idx][:, None, :, :], dtype=np.float32)
        return x, np.ascontiguousarray(labels[idx])

    x_train, y_train = pack(train)
    x_test, y_test = pack(test)
    return x_train, y_train, x_test, y_test
