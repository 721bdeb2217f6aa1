"""Every rank of `ronde run -np N` runs the same tests in the same order (.venv-mxnet)."""

import os

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")

import ronde.mxnet as hvd  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def runtime():
    hvd.init()
    yield
    hvd.shutdown()


@pytest.fixture(autouse=True)
def aligned():
    hvd.barrier()
    yield
