// The MPI backend's entry point, declared without mpi.h so that the registry needs no MPI
// headers (defined in mpi_communicator.cc, built only where CMake found MPI).
#pragma once

#include <memory>

#include "ronde/communicator.h"

namespace ronde {

std::unique_ptr<Communicator> makeMpiCommunicator(const CommOptions& options);

}  // namespace ronde
