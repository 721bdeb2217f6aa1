"""Every rank of `ronde run -np N` runs the same tests in the same order; collectives in a
test therefore meet their peers on the other ranks."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

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
    hvd.init()
    hvd.barrier()
    yield


@pytest.fixture(params=["eager", "function"])
def mode(request):
    """Runs a callable eagerly or as a tf.function (traced afresh for each test)."""
    if request.param == "eager":
        return lambda fn: fn
    return lambda fn: tf.function(fn)
