"""hvd.cuda_built() and hvd.nccl_built() against the installed library itself: CUDA kernels
leave a fatbinary section (.nv_fatbin) in libronde.so, and the NCCL backend makes it need
libnccl. readelf reads both without loading anything."""

import os
import shutil
import subprocess

import pytest

import ronde
import ronde.torch as hvd


def _readelf(flag):
    library = os.path.join(os.path.dirname(ronde.__file__), "lib", "libronde.so")
    if shutil.which("readelf") is None or not os.path.exists(library):
        pytest.skip("needs readelf and the wheel's ronde/lib/libronde.so")
    return subprocess.run(["readelf", flag, "-W", library], check=True, capture_output=True,
                          text=True).stdout


def test_cuda_built_tells_whether_the_library_holds_cuda_kernels():
    assert hvd.cuda_built() == (".nv_fatbin" in _readelf("-S"))


def test_nccl_built_is_the_nccl_version_when_the_library_needs_nccl():
    needs_nccl = "libnccl" in _readelf("-d")
    version = hvd.nccl_built()
    assert isinstance(version, int)
    if needs_nccl:
        assert version >= 21400  # nonblocking communicators (ncclCommInitRankConfig)
    else:
        assert version == 0
