// What `ronde run` needs to run an elastic job, in horovodrun's terms (cli.cc parses them).
#pragma once

#include <string>

namespace ronde::launcher {

struct ElasticOptions {
  std::string discovery_script;  // --host-discovery-script: set means the job is elastic
  int min_np = 0;                // --min-np (0: -np)
  int max_np = 0;                // --max-np (0: no limit)
  int slots_per_host = 1;        // --slots-per-host: for discovery lines without ":slots"
  int reset_limit = -1;          // --reset-limit (-1: none)
  // --blacklist-cooldown-range LO HI: a failed host may return after a random pause in
  // [LO, HI] seconds. Without it a failed host stays out of the job, as in Horovod.
  bool cooldown_given = false;
  double cooldown_low_seconds = 0;
  double cooldown_high_seconds = 0;
  double elastic_timeout_seconds = 600;  // --elastic-timeout
  double discovery_interval_seconds = 1;
  double discovery_timeout_seconds = 10;  // --host-discovery-timeout (ronde's own flag)
};

}  // namespace ronde::launcher
