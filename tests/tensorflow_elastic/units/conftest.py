"""Unit tests of the TensorFlow and Keras elastic states under `ronde run -np N` (N >= 2):
every rank runs the same tests in the same order, so the collectives of a test meet their
peers on the other ranks."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import ronde.tensorflow as hvd  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)


@pytest.fixture(scope="session", autouse=True)
def runtime():
    hvd.init()
    yield
    hvd.shutdown()


@pytest.fixture(autouse=True)
def aligned():
    # A failed assertion on one rank must not leave the others inside a collective of the
    # next test: meet before each test.
    hvd.barrier()
    yield
