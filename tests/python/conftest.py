"""Every rank of `ronde run -np N` runs the same tests in the same order; collectives in a
test therefore meet their peers on the other ranks."""

import os

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import ronde.torch as hvd  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def runtime():
    hvd.init()
    yield
    hvd.shutdown()


@pytest.fixture(autouse=True)
def aligned():
    # A failed assertion on one rank must not leave the others inside a collective of the
    # next test: meet before each test. Horovod-style tests shut the runtime down at their
    # end; the next test finds it initialized again.
    hvd.init()
    hvd.barrier()
    yield
