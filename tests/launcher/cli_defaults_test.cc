// Each default the `ronde run` help states is the one the code uses: the workers' settings
// from the typed table (settings.cc), the launcher's own from RunOptions. And each tuning flag
// sets the variable of the table it names, so no flag can set a misspelt, ignored variable.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "launcher/cli.h"
#include "launcher/run_options.h"
#include "ronde/errors.h"
#include "ronde/settings.h"

namespace ronde::launcher {
namespace {

std::string tableDefault(const std::string& name) {
  for (const Settings::Doc& doc : Settings::documentation()) {
    if (doc.name == name) return doc.default_value;
  }
  ADD_FAILURE() << name << " is not in the settings table";
  return "";
}

bool statesDefault(const std::string& flag, const std::string& value) {
  return runOptionDescription(flag).find("(default " + value + ")") != std::string::npos;
}

TEST(CliDefaults, WorkerFlagsStateTheSettingsTablesDefaults) {
  const std::pair<const char*, const char*> flags[] = {
      {"--cycle-time-ms", "CYCLE_TIME"},
      {"--cache-capacity", "CACHE_CAPACITY"},
      {"--stall-check-warning-time-seconds", "STALL_CHECK_TIME_SECONDS"},
      {"--stall-check-shutdown-time-seconds", "STALL_SHUTDOWN_TIME_SECONDS"},
      {"--liveness-timeout-seconds", "LIVENESS_TIMEOUT_SECONDS"},
  };
  for (const auto& [flag, setting] : flags) {
    EXPECT_TRUE(statesDefault(flag, tableDefault(setting)))
        << flag << ": " << runOptionDescription(flag);
  }
  // The table holds bytes, the flag takes MiB: 134217728 bytes is 128 MiB.
  EXPECT_EQ(tableDefault("FUSION_THRESHOLD"), "134217728");
  EXPECT_TRUE(statesDefault("--fusion-threshold-mb", "128"))
      << runOptionDescription("--fusion-threshold-mb");
  EXPECT_EQ(tableDefault("LOG_LEVEL"), "warning");
  EXPECT_TRUE(statesDefault("--log-level", "WARNING")) << runOptionDescription("--log-level");
  const std::string start = std::to_string(int(RunOptions{}.start_timeout_seconds)) + " / " +
                            tableDefault("START_TIMEOUT");
  EXPECT_TRUE(statesDefault("--start-timeout", start)) << runOptionDescription("--start-timeout");
}

TEST(CliDefaults, LauncherFlagsStateRunOptionsDefaults) {
  const RunOptions defaults;
  EXPECT_TRUE(statesDefault("--grace-period", std::to_string(int(defaults.grace_seconds))));
  EXPECT_TRUE(statesDefault("--slots-per-host", std::to_string(defaults.elastic.slots_per_host)));
  EXPECT_TRUE(statesDefault("--elastic-timeout",
                            std::to_string(int(defaults.elastic.elastic_timeout_seconds))));
  EXPECT_TRUE(statesDefault("--host-discovery-timeout",
                            std::to_string(int(defaults.elastic.discovery_timeout_seconds))));
  EXPECT_EQ(runOptionDescription("--no-such-flag"), "");
}

TEST(CliDefaults, EveryTuningFlagSetsAVariableOfTheTable) {
  // Flag and value pairs read better packed than one word a line.
  // clang-format off
  const auto settings = workerSettingsFromFlags(
      {"--fusion-threshold-mb", "2", "--cycle-time-ms", "3.5", "--cache-capacity", "7",
       "--hierarchical-allreduce", "--autotune", "--autotune-log-file", "a.csv",
       "--timeline-filename", "t.json", "--timeline-mark-cycles", "--no-stall-check",
       "--stall-check-warning-time-seconds", "9", "--stall-check-shutdown-time-seconds", "11",
       "--liveness-timeout-seconds", "13", "--log-level", "debug", "--start-timeout", "17",
       "--tcp", "--no-hierarchical-allgather"});
  // clang-format on
  std::set<std::string> table;
  for (const Settings::Doc& doc : Settings::documentation()) table.insert("RONDE_" + doc.name);
  // One variable per flag, but --hierarchical-allreduce's two (host and GPU paths).
  EXPECT_EQ(settings.size(), 17u);
  for (const auto& [name, value] : settings) EXPECT_EQ(table.count(name), 1u) << name;
  // What the workers read back from those variables is what the flags said.
  const Settings read = Settings::fromLookup([&](const std::string& name) -> const char* {
    for (const auto& [variable, value] : settings) {
      if (variable == name) return value.c_str();
    }
    return nullptr;
  });
  EXPECT_EQ(read.fusion_threshold_bytes, 2 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(read.cycle_time_ms, 3.5);
  EXPECT_EQ(read.cache_capacity, 7);
  EXPECT_TRUE(read.autotune);
  EXPECT_EQ(read.autotune_log, "a.csv");
  EXPECT_EQ(read.timeline_path, "t.json");
  EXPECT_TRUE(read.timeline_mark_cycles);
  EXPECT_TRUE(read.stall_check_disable);
  EXPECT_DOUBLE_EQ(read.stall_check_seconds, 9);
  EXPECT_DOUBLE_EQ(read.stall_shutdown_seconds, 11);
  EXPECT_DOUBLE_EQ(read.liveness_timeout_seconds, 13);
  EXPECT_EQ(read.log_level, LogLevel::kDebug);
  EXPECT_DOUBLE_EQ(read.start_timeout_seconds, 17);
  EXPECT_EQ(read.transport, TransportKind::kTcp);
  EXPECT_TRUE(read.hierarchical_allreduce);
  EXPECT_TRUE(read.gpu_hierarchical_allreduce);
  EXPECT_FALSE(read.hierarchical_allgather);
}

// horovodrun's timestamp flags, the deprecated spellings too, set RONDE_LOG_HIDE_TIME, which
// the workers' logger reads (log_timestamp_test.cc); two of them at once are refused.
TEST(CliDefaults, LogTimestampFlagsSetLogHideTime) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  const Env hidden = {{"RONDE_LOG_HIDE_TIME", "1"}};
  const Env shown = {{"RONDE_LOG_HIDE_TIME", "0"}};
  EXPECT_EQ(workerSettingsFromFlags({"--log-without-timestamp"}), hidden);
  EXPECT_EQ(workerSettingsFromFlags({"--log-hide-timestamp"}), hidden);
  EXPECT_EQ(workerSettingsFromFlags({"--log-with-timestamp"}), shown);
  EXPECT_EQ(workerSettingsFromFlags({"--no-log-hide-timestamp"}), shown);
  EXPECT_THROW(workerSettingsFromFlags({"--log-with-timestamp", "--log-hide-timestamp"}), Error);
}

TEST(CliDefaults, BadFlagsAreInvalidArgument) {
  try {
    workerSettingsFromFlags({"--cycle-time-ms", "-1"});
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  }
}

std::string flagError(const std::vector<std::string>& flags) {
  try {
    workerSettingsFromFlags(flags);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
    return error.what();
  }
  ADD_FAILURE() << flags[0] << " " << flags[1] << " was accepted";
  return "";
}

// --fusion-threshold-mb 1e30 used to set RONDE_FUSION_THRESHOLD='-9223372036854775808' (llround
// of a value beyond int64). Every flag whose number becomes an integer (bytes, a timeout in
// the clock's nanoseconds) refuses what would not fit, naming the flag and its largest value.
TEST(CliDefaults, NumbersBeyondTheirIntegerAreRefusedByName) {
  std::string message = flagError({"--fusion-threshold-mb", "1e30"});
  EXPECT_NE(message.find("--fusion-threshold-mb"), std::string::npos) << message;
  EXPECT_NE(message.find("must be at most 8796093022207, not 1e30"), std::string::npos)
      << message;
  // The largest accepted value still fits: 2^63 - 2^20 bytes, not a wrapped negative.
  auto settings = workerSettingsFromFlags({"--fusion-threshold-mb", "8796093022207"});
  ASSERT_EQ(settings.size(), 1u);
  EXPECT_EQ(settings[0].second, "9223372036853727232");
  message = flagError({"--fusion-threshold-mb", "8796093022208"});
  EXPECT_NE(message.find("must be at most 8796093022207, not 8796093022208"), std::string::npos)
      << message;
  for (const char* flag :
       {"--cycle-time-ms", "--stall-check-warning-time-seconds",
        "--stall-check-shutdown-time-seconds", "--liveness-timeout-seconds", "--start-timeout",
        "--grace-period", "--elastic-timeout", "--host-discovery-timeout"}) {
    for (const char* value : {"1e30", "inf", "1000000001"}) {
      message = flagError({flag, value});
      EXPECT_NE(message.find(flag), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("must be at most 1000000000, not ") + value),
                std::string::npos)
          << message;
    }
    // The bound itself is accepted (it is what the workers' settings accept too).
    EXPECT_NO_THROW(workerSettingsFromFlags({flag, "1e9"})) << flag;
  }
  message = flagError({"--blacklist-cooldown-range", "1", "1e30"});
  EXPECT_NE(message.find("--blacklist-cooldown-range"), std::string::npos) << message;
  EXPECT_NE(message.find("must be at most 1000000000, not 1e30"), std::string::npos) << message;
  // What a flag sets, the workers read back within their own range.
  settings = workerSettingsFromFlags({"--liveness-timeout-seconds", "1e9"});
  const Settings read = Settings::fromLookup([&](const std::string& name) -> const char* {
    return name == settings[0].first ? settings[0].second.c_str() : nullptr;
  });
  EXPECT_DOUBLE_EQ(read.liveness_timeout_seconds, kLargestRealSetting);
}

TEST(CliDefaults, ANameOutsideTheTableIsABug) {
  EXPECT_EQ(Settings::variableName("CYCLE_TIME"), "RONDE_CYCLE_TIME");
  EXPECT_EQ(Settings::defaultText("CACHE_CAPACITY"), "1024");
  try {
    Settings::variableName("CYCLE_TIME_MS");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInternal);
  }
}

}  // namespace
}  // namespace ronde::launcher
