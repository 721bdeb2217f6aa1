// The one place that knows which backends this build has: RONDE_HAVE_MPI is defined for this
// file alone when CMake found MPI and built src/backends/mpi/; RONDE_HAVE_CUDA and
// RONDE_HAVE_NCCL when cmake/ronde_cuda.cmake built src/cuda/ and src/backends/nccl/.
#include "backends/backend_registry.h"

#include "backends/native/native_communicator.h"
#include "comm/external_launcher.h"
#include "common/logging.h"
#include "ronde/errors.h"

#ifdef RONDE_HAVE_MPI
#include "backends/mpi/mpi_backend.h"
#endif
#ifdef RONDE_HAVE_NCCL
#include "backends/nccl/nccl_backend.h"
#endif

namespace ronde {
namespace {

std::unique_ptr<Communicator> createNative(const CommOptions& options) {
  return std::make_unique<NativeCommunicator>(options);
}

std::string nativeServesEveryLauncher(const std::string&) { return ""; }

std::string mpiNeedsAnMpiLauncher(const std::string& launcher) {
  if (launcher.empty()) {
    return "the MPI backend needs ranks started by mpirun or srun (MPI_Init cannot join ranks "
           "that `ronde run` without --mpi or RONDE_RANK started); unset it or start the job "
           "with `ronde run --mpi` or mpirun";
  }
  return "";
}

#ifdef RONDE_HAVE_MPI
constexpr bool kMpiBuilt = true;
std::unique_ptr<Communicator> createMpi(const CommOptions& options) {
  return makeMpiCommunicator(options);
}
#else
constexpr bool kMpiBuilt = false;
std::unique_ptr<Communicator> createMpi(const CommOptions&) {
  throw makeError(ErrorCode::kConfig, "this build of ronde has no MPI backend");
}
#endif

#ifdef RONDE_HAVE_NCCL
constexpr bool kNcclBuilt = true;
std::unique_ptr<Communicator> createNccl(const CommOptions& options) {
  return makeNcclCommunicator(options);
}
#else
constexpr bool kNcclBuilt = false;
std::unique_ptr<Communicator> createNccl(const CommOptions&) {
  throw makeError(ErrorCode::kConfig, "this build of ronde has no NCCL backend");
}
#endif

#ifdef RONDE_HAVE_CUDA
constexpr bool kCudaBuilt = true;
#else
constexpr bool kCudaBuilt = false;
#endif

}  // namespace

bool cudaBuilt() { return kCudaBuilt; }

int ncclBuiltVersion() {
#ifdef RONDE_HAVE_NCCL
  return loadedNcclVersion();
#else
  return 0;
#endif
}

const Backend& deviceBackend(const std::string& name) {
  for (const Backend& backend : backends()) {
    if (!backend.device_buffers || name != backend.name) continue;
    if (!backend.built) {
      throw makeError(ErrorCode::kConfig, "the ", name,
                      " backend is not in this build of ronde: rebuild with CUDA and NCCL "
                      "(scripts/setup_cuda_venv.sh, -DRONDE_WITH_NCCL=ON; docs/gpu.md)");
    }
    return backend;
  }
  throw makeError(ErrorCode::kConfig, "no device backend called '", name, "' (there is: nccl)");
}

bool deviceBackendBuilt(const std::string& name) {
  for (const Backend& backend : backends()) {
    if (backend.device_buffers && name == backend.name) return backend.built;
  }
  return false;
}

const std::vector<Backend>& backends() {
  // MPI comes first when asked for, but never unasked: a job started by mpirun keeps ronde's
  // own transports unless RONDE_CPU_OPERATIONS=mpi says otherwise (as HOROVOD_CPU_OPERATIONS).
  static const std::vector<Backend> all = {
      {CpuOperations::kMpi, "mpi", "OpenMPI's collectives (RONDE_CPU_OPERATIONS=mpi under mpirun)",
       kMpiBuilt, false, mpiNeedsAnMpiLauncher, createMpi},
      {CpuOperations::kNative, "native", "ronde's own collectives over shm and TCP", true, true,
       nativeServesEveryLauncher, createNative},
      {std::nullopt, "nccl", "NVIDIA's collectives on CUDA buffers, one rank per GPU", kNcclBuilt,
       false, nativeServesEveryLauncher, createNccl, true},
  };
  return all;
}

const Backend& chooseBackend(CpuOperations requested, const std::string& launcher) {
  for (const Backend& backend : backends()) {
    if (requested == CpuOperations::kAuto) {
      if (backend.built && backend.chosen_by_default) return backend;
      continue;
    }
    if (backend.kind != requested) continue;
    if (!backend.built) {
      throw makeError(ErrorCode::kConfig, "RONDE_CPU_OPERATIONS=", backend.name,
                      " (or HOROVOD_CPU_OPERATIONS) asks for the ", backend.name,
                      " backend, but this build of ronde has none: rebuild where CMake finds it "
                      "(for MPI: apt-get install libopenmpi-dev, -DRONDE_WITH_MPI=ON)");
    }
    std::string reason = backend.unavailable_reason(launcher);
    if (!reason.empty()) {
      throw makeError(ErrorCode::kConfig, "RONDE_CPU_OPERATIONS=", backend.name, ": ", reason);
    }
    return backend;
  }
  throw makeError(ErrorCode::kConfig, "no communication backend for RONDE_CPU_OPERATIONS=",
                  cpuOperationsName(requested));
}

std::unique_ptr<Communicator> Communicator::create(const CommOptions& options) {
  // Only MPI cares how the ranks were started; the others never read the environment.
  const std::string launcher =
      options.backend == CpuOperations::kMpi ? detectExternalLauncher().name : "";
  // A communicator made here is a world of its own (sub-communicators are made by their
  // backend's create): the process logs as its rank there, or as the rank its label names.
  setLogPrefix(rankLogPrefix(options.rank_labels.empty()
                                 ? options.rank
                                 : options.rank_labels.at(static_cast<size_t>(options.rank))));
  return chooseBackend(options.backend, launcher).create(options);
}

}  // namespace ronde
