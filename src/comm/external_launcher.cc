#include "comm/external_launcher.h"

#include <unistd.h>

#include <cstdlib>

#include "ronde/errors.h"

namespace ronde {
namespace {

int envInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  if (*end != '\0' || parsed < 0) {
    throw makeError(ErrorCode::kConfig, name, "='", value, "' is not a non-negative integer");
  }
  return static_cast<int>(parsed);
}

std::string envString(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

ExternalLauncher detectExternalLauncher() {
  ExternalLauncher launcher;
  if (std::getenv("OMPI_COMM_WORLD_RANK")) {
    launcher.name = "mpirun";
    launcher.rank = envInt("OMPI_COMM_WORLD_RANK", 0);
    launcher.size = envInt("OMPI_COMM_WORLD_SIZE", 1);
    launcher.job_id = envString("OMPI_MCA_ess_base_jobid");
    if (launcher.job_id.empty()) launcher.job_id = envString("PMIX_NAMESPACE");
  } else if (std::getenv("PMI_RANK")) {
    launcher.name = "mpirun";
    launcher.rank = envInt("PMI_RANK", 0);
    launcher.size = envInt("PMI_SIZE", 1);
    launcher.job_id = envString("PMI_JOBID");
  } else if (std::getenv("SLURM_PROCID")) {
    launcher.name = "srun";
    launcher.rank = envInt("SLURM_PROCID", 0);
    launcher.size = envInt("SLURM_NTASKS", 1);
    launcher.job_id = envString("SLURM_JOB_ID") + "." + envString("SLURM_STEP_ID");
  }
  if (!launcher.name.empty() && launcher.job_id.empty()) {
    launcher.job_id = std::to_string(::getppid());  // ranks on a host share their launcher
  }
  return launcher;
}

}  // namespace ronde
