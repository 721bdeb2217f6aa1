// The environment a worker starts with: who it is (rank, sizes, host), where the job meets
// (store address, secret), the settings chosen on the command line, and variables the user
// asked to pass with -x. Names are the contract with Settings::fromEnvironment().
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/host_list.h"

namespace ronde::launcher {

using EnvList = std::vector<std::pair<std::string, std::string>>;
// name -> value, or nullptr when unset (getenv, or a map in tests).
using EnvLookup = std::function<const char*(const std::string&)>;

// What every worker of the job shares.
struct JobEnvironment {
  std::string secret;
  std::string network_interface;  // empty: RONDE_INTERFACE is not set
  EnvList settings;               // from tuning flags, e.g. RONDE_CYCLE_TIME=5
  EnvList passed;                 // from -x
};

// RONDE_* and HOROVOD_* identity variables of one rank, the store address it should use,
// then the job's settings and passed variables (later entries win).
EnvList workerVariables(const RankPlacement& placement, const std::string& hostname,
                        const std::string& store_address, const JobEnvironment& job);

// Resolves "-x NAME" (value from `lookup`) and "-x NAME=value". Throws Error(kInvalidArgument)
// for a bad name or a NAME the launcher's environment does not have.
EnvList resolvePassedVariables(const std::vector<std::string>& requests, const EnvLookup& lookup);

// The full environment of a local worker: the launcher's own `environ` with `overrides`
// replacing or adding entries; "NAME=value" strings ready for execve.
std::vector<std::string> mergeEnvironment(char* const* environ, const EnvList& overrides);

// RONDE_* and HOROVOD_* variables of the launcher's environment that `ours` does not set:
// user settings such as RONDE_LOG_LEVEL travel to remote workers too.
EnvList forwardedSettings(char* const* environ, const EnvList& ours);

bool isValidVariableName(const std::string& name);

// Sets name=value in env, replacing an earlier value of the same name.
void setVariable(EnvList* env, const std::string& name, const std::string& value);

}  // namespace ronde::launcher
