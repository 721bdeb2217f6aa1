"""ronde.tensorflow.keras on whatever tf.keras is: run once with KERAS_BACKEND=tensorflow (Keras
3) and once with TF_USE_LEGACY_KERAS=1 (tf_keras, Keras 2). Every rank of `ronde run -np N`
runs the same tests in the same order, so collectives in a test meet their peers."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import ronde.tensorflow.keras as hvd  # noqa: E402

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
    hvd.init()
    hvd.allgather_object(None)
    yield
