"""Keras 2 in TF1 graph mode, as old Horovod scripts run it: TF_USE_LEGACY_KERAS=1 (tf_keras),
eager execution disabled before anything runs, model.fit on legacy optimizers in Keras's
session. Every rank runs the same tests in the same order."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()

import ronde.tensorflow.keras as hvd  # noqa: E402
from ronde.tensorflow.keras.world import tf_keras_is_keras2  # noqa: E402

if not tf_keras_is_keras2():
    raise RuntimeError("tests/tensorflow_keras_graph needs TF_USE_LEGACY_KERAS=1 and tf_keras")


@pytest.fixture(scope="session", autouse=True)
def runtime():
    hvd.init()
    yield
    hvd.shutdown()


@pytest.fixture(autouse=True)
def aligned():
    hvd.init()
    hvd.allgather_object(None)
    yield
