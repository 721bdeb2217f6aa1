"""Keras 3 tests; the backend is KERAS_BACKEND (tensorflow, torch or jax), set by the caller."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402

import ronde.keras as hvd  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def runtime():
    hvd.init()
    yield
    hvd.shutdown()


@pytest.fixture(autouse=True)
def aligned():
    hvd.init()
    hvd.allgather_object(None)  # meet before each test
    yield
