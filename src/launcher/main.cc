// `ronde`: the command-line front door (see docs/launcher.md).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "launcher/cli.h"

int main(int argc, char** argv) {
  try {
    return ronde::launcher::runCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ronde: %s\n", error.what());
    return 1;
  }
}
