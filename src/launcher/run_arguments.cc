// Splitting `ronde run`'s words into its options and the worker command (cli.h).
#include "launcher/cli.h"

#include <map>
#include <string>
#include <vector>

namespace ronde::launcher {
namespace {

const std::map<std::string, std::string>& singleDashSpellings() {
  static const std::map<std::string, std::string> spellings = {
      {"-np", "--num-proc"},
      {"-hostfile", "--hostfile"},
      {"-prefix-timestamp", "--prefix-output-with-timestamp"},
      {"-cb", "--check-build"},
  };
  return spellings;
}

}  // namespace

SplitArguments splitRunArguments(const std::vector<std::string>& args,
                                 int (*takes_value)(const std::string&, void*), void* context) {
  SplitArguments split;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the command starts here
    size_t equals = arg.find('=');
    std::string name = arg.substr(0, equals);
    auto spelling = singleDashSpellings().find(name);
    if (spelling != singleDashSpellings().end()) {
      name = spelling->second;
      arg = name + (equals == std::string::npos ? "" : arg.substr(equals));
    }
    split.options.push_back(arg);
    int value = takes_value(name, context);
    if (value < 0 && arg[1] != '-' && arg.size() > 2) {
      // "-xNAME" or "-p2222": a short option with its value attached.
      if (takes_value(arg.substr(0, 2), context) == 1) continue;
    }
    for (int taken = 0; equals == std::string::npos && taken < value && i + 1 < args.size();
         ++taken) {
      split.options.push_back(args[++i]);
    }
  }
  split.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return split;
}

}  // namespace ronde::launcher
