// What the launcher checks of the workers' settings before it starts any worker, so that bad
// input is one line from `ronde run` (exit 2) rather than an error in every worker a few
// seconds later.
#pragma once

#include "launcher/worker_env.h"
#include "ronde/settings.h"

namespace ronde::launcher {

// Reads the settings a worker would read: `variables` (the workers' own: flags, -x), then the
// launcher's environment for what they leave unset. The settings table's parser does the
// reading, so a bad value is refused with the runtime's own message (Error(kConfig)).
Settings checkWorkerSettings(const EnvList& variables);

// checkWorkerSettings, after a warning for each misspelt RONDE_* variable among `variables`
// and the launcher's environment (misspelt_settings.h).
Settings checkJobSettings(const EnvList& variables);

// The files rank 0 writes (the timeline, the autotune log) need their folder to exist: a
// missing one is an Error(kInvalidArgument) naming the setting and the folder. Call where
// rank 0 runs on this host; `autotune` logs are only written when autotuning is on.
void checkOutputFolders(const Settings& settings);

}  // namespace ronde::launcher
