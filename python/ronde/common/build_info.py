"""What this build has and what the running job uses: Horovod's mpi_built(), gloo_built(), ...

ronde's own backend (shared memory and TCP) is what Horovod calls Gloo's job; MPI is a
backend of its own when the core was built against an MPI library, used when
RONDE_CPU_OPERATIONS=mpi (HOROVOD_CPU_OPERATIONS=MPI) under mpirun or srun. CUDA (the device
fusion kernels) and NCCL (a backend for CUDA buffers) are in a build where CMake found them
(docs/gpu.md); DDL, oneCCL and ROCm never are.
"""

from ronde import _core


def mpi_built():
    return "mpi" in _core.built_backends()


def mpi_enabled():
    """True while the running job's collectives go through MPI."""
    return _core.is_initialized() and _core.transport_name() == "mpi"


def mpi_threads_supported():
    # The MPI backend initialises MPI with MPI_THREAD_MULTIPLE when it can, and calls it from
    # the runtime's one thread either way: a user's own MPI calls may come from any thread
    # only when MPI granted MULTIPLE, which this build does not report; say no.
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    """Horovod's nccl_built(): the NCCL version of this build's NCCL backend (e.g. 22809 for
    2.28.9), 0 when the core was built without NCCL."""
    return _core.nccl_version()


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """Horovod's cuda_built(): True when the core was built with CUDA (its device fusion
    kernels and CUDA devices): only then does ronde.torch take CUDA tensors, which the runtime
    stages through host memory (docs/gpu.md)."""
    return _core.cuda_built()


def rocm_built():
    return False
