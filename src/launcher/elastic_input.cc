#include "launcher/elastic_input.h"

#include <cstdlib>

#include "launcher/worker_settings_check.h"
#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

void checkCounts(const RunOptions& options) {
  const ElasticOptions& elastic = options.elastic;
  if (options.num_ranks <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "-np is required with --host-discovery-script (how many workers to start with)");
  }
  const int min_np = elastic.min_np > 0 ? elastic.min_np : options.num_ranks;
  if (elastic.max_np > 0 && (elastic.max_np < min_np || elastic.max_np < options.num_ranks)) {
    throw makeError(ErrorCode::kInvalidArgument, "--max-np ", elastic.max_np, " is below -np ",
                    options.num_ranks, " or --min-np ", min_np);
  }
  if (min_np > options.num_ranks) {
    throw makeError(ErrorCode::kInvalidArgument, "--min-np ", min_np, " is above -np ",
                    options.num_ranks);
  }
}

}  // namespace

void checkElasticInput(const RunOptions& options) {
  if (options.command.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "no command given: ronde run -np N --host-discovery-script S COMMAND ...");
  }
  if (options.hosts_given || options.hostfile_given) {
    throw Error(ErrorCode::kInvalidArgument,
                "give -H/--hostfile or --host-discovery-script, not both");
  }
  checkCounts(options);
  const ElasticOptions& elastic = options.elastic;
  if (elastic.cooldown_given && elastic.cooldown_low_seconds > elastic.cooldown_high_seconds) {
    throw makeError(ErrorCode::kInvalidArgument, "--blacklist-cooldown-range ",
                    elastic.cooldown_low_seconds, " ", elastic.cooldown_high_seconds,
                    ": the low end is above the high end");
  }
  EnvList variables = options.settings;  // then -x's, which win, as the driver adds them
  const EnvList passed = resolvePassedVariables(
      options.env_requests, [](const std::string& name) { return std::getenv(name.c_str()); });
  variables.insert(variables.end(), passed.begin(), passed.end());
  checkJobSettings(variables);
}

}  // namespace ronde::launcher
