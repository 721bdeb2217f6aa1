// Which launcher other than `ronde run` started this process, from the variables mpirun
// (OpenMPI, or any PMI-based MPI) and srun set for their ranks.
#pragma once

#include <string>

namespace ronde {

struct ExternalLauncher {
  std::string name;    // "mpirun", "srun" or empty (not started by either)
  std::string job_id;  // identifies this job on the host
  int rank = -1;
  int size = -1;
};

// Error(kConfig) when a rank or size variable is not a non-negative integer.
ExternalLauncher detectExternalLauncher();

}  // namespace ronde
