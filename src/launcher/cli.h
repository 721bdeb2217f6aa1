// The `ronde` command line: `ronde run ...`, `ronde check-build [--settings]`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ronde::launcher {

// Parses `args` (without the program name) and runs the subcommand; returns the exit code.
int runCommandLine(const std::vector<std::string>& args);

// horovodrun spells some long options with one dash (-np, -hostfile); CLI11 wants two.
// Also splits off the worker command: the first word that is neither an option nor an
// option's value, or everything after "--". Exposed for tests.
struct SplitArguments {
  std::vector<std::string> options;
  std::vector<std::string> command;
};
// `takes_value(name)`: how many values option `name` takes (1, or 2 for
// --blacklist-cooldown-range LO HI), 0 for a flag, -1 when unknown.
SplitArguments splitRunArguments(const std::vector<std::string>& args,
                                 int (*takes_value)(const std::string& name, void* context),
                                 void* context);

// The description of one `ronde run` flag ("--cycle-time-ms") as --help prints it, so tests
// can hold the default it states against the settings table. Empty for an unknown flag.
std::string runOptionDescription(const std::string& flag);

// The RONDE_* variables that `ronde run FLAGS...` hands every worker (no command is run).
// Error(kInvalidArgument) for flags that do not parse.
std::vector<std::pair<std::string, std::string>> workerSettingsFromFlags(
    const std::vector<std::string>& flags);

// `python`: the interpreter whose frameworks to report ("" for python3 on PATH).
int checkBuild(bool print_settings, const std::string& python);

}  // namespace ronde::launcher
