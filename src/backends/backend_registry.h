// The communication backends behind the Communicator contract, in order of preference, and the
// choice among them at init. A backend compiled out (MPI without an MPI library, NCCL without
// CUDA and NCCL) stays in the list with built == false, so that asking for it names the reason,
// and `ronde check-build` shows it unticked. Host backends serve RONDE_CPU_OPERATIONS; a device
// backend (NCCL: buffers in GPU memory) is never chosen for host buffers, only by name through
// deviceBackend().
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ronde/communicator.h"
#include "ronde/settings.h"

namespace ronde {

struct Backend {
  // The RONDE_CPU_OPERATIONS value that picks it; none for a device backend.
  std::optional<CpuOperations> kind;
  const char* name;         // "native", "mpi", "nccl": the value RONDE_CPU_OPERATIONS takes
  const char* description;  // one line for check-build
  bool built;               // compiled into this library
  // Chosen under RONDE_CPU_OPERATIONS=auto when it is the first such backend built.
  bool chosen_by_default;
  // Empty when the backend can serve ranks started by `launcher` ("mpirun", "srun" or ""); else
  // why not, for the error when it was asked for.
  std::string (*unavailable_reason)(const std::string& launcher);
  std::unique_ptr<Communicator> (*create)(const CommOptions& options);
  // Its collectives take CUDA device pointers (on CommOptions::cuda_device).
  bool device_buffers = false;
};

// Every backend ronde knows, most preferred first.
const std::vector<Backend>& backends();

// The backend `requested` names, or under kAuto the first built one chosen by default.
// Error(kConfig) naming the variable when the requested backend is not built or cannot serve
// ranks started by `launcher`.
const Backend& chooseBackend(CpuOperations requested, const std::string& launcher);

// The device backend called `name` ("nccl"). Error(kConfig) when there is none of that name or
// this build lacks it.
const Backend& deviceBackend(const std::string& name);

// Whether this build has the device backend called `name`.
bool deviceBackendBuilt(const std::string& name);

// This build has the CUDA kernels (src/cuda/*.cu).
bool cudaBuilt();
// The NCCL version this build's NCCL backend loaded (e.g. 22809), 0 without one. Horovod's
// nccl_built() returns the same number.
int ncclBuiltVersion();

}  // namespace ronde
