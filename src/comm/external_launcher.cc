#include "comm/external_launcher.h"

#include <unistd.h>

#include <cstdlib>

#include "ronde/errors.h"

namespace ronde {
namespace {

// The variables other launchers set for their ranks, tried in this order. This is the one
// table of environment *detection*: it reads what mpirun and srun say, not ronde's own
// settings (those are RONDE_*/HOROVOD_* in the typed table, src/common/settings.cc).
struct LauncherVariables {
  const char* launcher;  // the name reported: "mpirun" or "srun"
  const char* rank;      // set: this launcher started the process
  const char* size;
  const char* job_id;              // identifies the job on the host
  const char* job_id_alternative;  // read when job_id is unset (nullptr: none)
  const char* job_step;            // appended as ".<step>" (nullptr: none)
};

constexpr LauncherVariables kOtherLaunchersVariables[] = {
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid",
     "PMIX_NAMESPACE", nullptr},
    {"mpirun", "PMI_RANK", "PMI_SIZE", "PMI_JOBID", nullptr, nullptr},  // MPICH, Intel MPI
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", nullptr, "SLURM_STEP_ID"},
};

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
  for (const LauncherVariables& known : kOtherLaunchersVariables) {
    if (std::getenv(known.rank) == nullptr) continue;
    launcher.name = known.launcher;
    launcher.rank = envInt(known.rank, 0);
    launcher.size = envInt(known.size, 1);
    launcher.job_id = envString(known.job_id);
    if (launcher.job_id.empty() && known.job_id_alternative != nullptr) {
      launcher.job_id = envString(known.job_id_alternative);
    }
    if (known.job_step != nullptr) launcher.job_id += "." + envString(known.job_step);
    break;
  }
  if (!launcher.name.empty() && launcher.job_id.empty()) {
    launcher.job_id = std::to_string(::getppid());  // ranks on a host share their launcher
  }
  return launcher;
}

}  // namespace ronde
