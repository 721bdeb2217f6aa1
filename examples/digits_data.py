"""The digits data for the TensorFlow and Keras examples, without torch: scikit-learn's
1,797 8x8 images, split 80/20 with a fixed seed, the same way on every rank."""

import gzip
import importlib.util
import os

import numpy as np


def digits_path():
    """scikit-learn's copy of the digits data: this interpreter's sklearn, else Debian's."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        found = os.path.join(spec.submodule_search_locations[0], "datasets", "data",
                             "digits.csv.gz")
        if os.path.exists(found):
            return found
    return "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def load_digits(path=None, test_fraction=0.2, seed=0):
    """(train_x, train_y, test_x, test_y) as float32 / int64 numpy arrays."""
    with gzip.open(path or digits_path(), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = table[:, :64] / 16.0
    y = table[:, 64].astype(np.int64)
    order = np.random.RandomState(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]
