// What an elastic job's command line must hold before the driver starts (elastic_driver.h):
// a command, -np within --min-np and --max-np, no -H or --hostfile besides the discovery
// script, a cooldown range in order, and settings the workers can read.
#pragma once

#include "launcher/run_options.h"

namespace ronde::launcher {

// Throws Error(kInvalidArgument), or Error(kConfig) for a bad RONDE_*/HOROVOD_* value (the
// settings table's own message), naming what is wrong. Warns about misspelt RONDE_* names.
void checkElasticInput(const RunOptions& options);

}  // namespace ronde::launcher
