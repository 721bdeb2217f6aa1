// `ronde run --config-file`: horovodrun's YAML schema, each key the flag of the same setting,
// errors naming the key and the line, and the command line winning over the file.
#include "launcher/config_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <unistd.h>

#include "launcher/cli.h"
#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

std::string errorOf(const std::string& text) {
  try {
    parseConfigText(text, "c.yaml");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    return error.what();
  }
  return "(no error)";
}

TEST(ConfigFile, EveryKeyIsItsFlag) {
  const auto entries = parseConfigText(
      "# horovodrun's schema\n"
      "controller: gloo\n"
      "params:\n  fusion_threshold_mb: 32\n  hierarchical_allgather: false\n"
      "autotune:\n  enabled: yes\n  gaussian_process_noise: 0.5\n"
      "timeline:\n  filename: 't.json'\n"
      "logging:\n  level: debug\n  with_timestamp: false\n",
      "c.yaml");
  ASSERT_EQ(entries.size(), 8u);
  EXPECT_EQ(entries[0].args, std::vector<std::string>({"--gloo"}));
  EXPECT_EQ(entries[1].key, "params.fusion_threshold_mb");
  EXPECT_EQ(entries[1].line, 4);
  EXPECT_EQ(entries[1].args, std::vector<std::string>({"--fusion-threshold-mb", "32"}));
  EXPECT_EQ(entries[2].args, std::vector<std::string>({"--no-hierarchical-allgather"}));
  EXPECT_EQ(entries[3].args, std::vector<std::string>({"--autotune"}));
  EXPECT_EQ(entries[5].args, std::vector<std::string>({"--timeline-filename", "t.json"}));
  EXPECT_EQ(entries[7].args, std::vector<std::string>({"--log-without-timestamp"}));
  EXPECT_EQ(entries[7].overridden_by,
            std::vector<std::string>({"--log-with-timestamp", "--log-without-timestamp",
                                      "--log-hide-timestamp", "--no-log-hide-timestamp"}));
}

TEST(ConfigFile, NothingSetIsNothing) {
  EXPECT_TRUE(parseConfigText("", "c.yaml").empty());
  EXPECT_TRUE(parseConfigText("# only a comment\n", "c.yaml").empty());
  EXPECT_TRUE(parseConfigText("params:\ntimeline:\n  filename: ~\n", "c.yaml").empty());
}

TEST(ConfigFile, ErrorsNameTheKeyAndTheLine) {
  EXPECT_EQ(errorOf("params:\n  cycle_time_ms: fast\n"),
            "c.yaml:2: params.cycle_time_ms: expected a number, not the value 'fast'");
  EXPECT_EQ(errorOf("params:\n  cache_capacity: 1.5\n"),
            "c.yaml:2: params.cache_capacity: expected an integer, not the value '1.5'");
  EXPECT_EQ(errorOf("\nparams:\n  hierarchical_allreduce: \"true\"\n"),
            "c.yaml:3: params.hierarchical_allreduce: expected a boolean (true or false), not "
            "the string 'true'");
  EXPECT_EQ(errorOf("params:\n  fusion_threshold: 3\n"),
            "c.yaml:2: unknown key 'params.fusion_threshold' (params has fusion_threshold_mb, "
            "cycle_time_ms, cache_capacity, hierarchical_allreduce, hierarchical_allgather and "
            "torus_allreduce)");
  EXPECT_EQ(errorOf("verbose: true\n"),
            "c.yaml:1: unknown key 'verbose' (the file's keys are controller, params, autotune, "
            "timeline, stall_check, library_options and logging)");
  EXPECT_EQ(errorOf("timeline:\n  filename: [a, b]\n"),
            "c.yaml:2: timeline.filename: expected a string, not a list");
  EXPECT_EQ(errorOf("params:\n  cycle_time_ms: 1\n  cycle_time_ms: 2\n"),
            "c.yaml:3: params.cycle_time_ms is given twice (first on line 2)");
  EXPECT_EQ(errorOf("- params\n"),
            "c.yaml:1: expected a mapping of controller, params, autotune, timeline, "
            "stall_check, library_options and logging, not a list");
  EXPECT_EQ(errorOf("controller: nccl\n"), "c.yaml:1: controller: no such controller 'nccl' "
                                           "(gloo or mpi)");
}

TEST(ConfigFile, MalformedYamlNamesItsLine) {
  EXPECT_EQ(errorOf("params:\n  cycle_time_ms: [1, 2\n"),
            "c.yaml:3: malformed YAML: did not find expected ',' or ']' while parsing a flow "
            "sequence");
  EXPECT_EQ(errorOf("a: &x 1\nb: *x\n"), "c.yaml:1: anchors (&name) are not supported");
  EXPECT_EQ(errorOf("params: {}\n---\nparams: {}\n"),
            "c.yaml:2: a second YAML document: the file must hold one");
}

// A file on disk that lives as long as the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/ronde_config_XXXXXX";
    int fd = ::mkstemp(name);
    ::close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::map<std::string, std::string> settingsOf(const std::vector<std::string>& flags) {
  std::map<std::string, std::string> result;
  for (const auto& [name, value] : workerSettingsFromFlags(flags)) result[name] = value;
  return result;
}

TEST(ConfigFile, TheCommandLineWins) {
  TempFile file(
      "params:\n  cycle_time_ms: 2.5\n  cache_capacity: 9\n"
      "stall_check:\n  enabled: false\n"
      "logging:\n  with_timestamp: false\n");
  auto settings = settingsOf({"--config-file", file.path()});
  EXPECT_EQ(settings["RONDE_CYCLE_TIME"], "2.5");
  EXPECT_EQ(settings["RONDE_CACHE_CAPACITY"], "9");
  EXPECT_EQ(settings["RONDE_STALL_CHECK_DISABLE"], "1");
  EXPECT_EQ(settings["RONDE_LOG_HIDE_TIME"], "1");
  // Before or after --config-file: the flag wins, and so does its opposite.
  settings = settingsOf({"--cycle-time-ms", "7", "--config-file", file.path(), "--stall-check",
                         "--no-log-hide-timestamp"});
  EXPECT_EQ(settings["RONDE_CYCLE_TIME"], "7");
  EXPECT_EQ(settings["RONDE_CACHE_CAPACITY"], "9");
  EXPECT_EQ(settings["RONDE_STALL_CHECK_DISABLE"], "0");
  EXPECT_EQ(settings["RONDE_LOG_HIDE_TIME"], "0");
}

TEST(ConfigFile, KeysOfRefusedFlagsAreRefusedWithTheFlagsReason) {
  TempFile file("library_options:\n  thread_affinity: 2\n");
  try {
    workerSettingsFromFlags({"--config-file", file.path()});
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()),
              file.path() + ":2: library_options.thread_affinity: --thread-affinity: not "
                            "supported by ronde: the background thread is not pinned to a core");
  }
}

}  // namespace
}  // namespace ronde::launcher
