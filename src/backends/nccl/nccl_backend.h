// The NCCL backend's entry points, declared without nccl.h or CUDA headers so that the registry
// needs neither (defined in nccl_communicator.cc, built only where CMake found CUDA and NCCL).
#pragma once

#include <memory>

#include "ronde/communicator.h"

namespace ronde {

std::unique_ptr<Communicator> makeNcclCommunicator(const CommOptions& options);
// The version of the NCCL library loaded (NCCL_VERSION_CODE form, e.g. 22809 for 2.28.9).
int loadedNcclVersion();

}  // namespace ronde
