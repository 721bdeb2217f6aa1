// A RONDE_* variable that is no setting of ronde is most often a typo (RONDE_CYCLE_TIMES):
// ronde would ignore it silently. The launcher warns about each one that is close to a real
// setting's name, naming the nearest.
#pragma once

#include <string>

#include "launcher/worker_env.h"

namespace ronde::launcher {

// The real RONDE_* setting nearest to `name` (RONDE_* but not a setting), by edit distance,
// or "" when none is close enough to be what was meant.
std::string nearestSettingName(const std::string& name);

// Warns (one "ronde run:" line each) about the misspelt RONDE_* variables among the
// launcher's environment and the workers' own variables.
void warnMisspeltSettings(char* const* environ, const EnvList& variables);

}  // namespace ronde::launcher
