// The launcher's own messages to the user: one line on stderr, prefixed "ronde run: ", so
// they stand apart from the workers' prefixed output.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>

namespace ronde::launcher {

void reportLine(const std::string& line);

template <typename... Parts>
void report(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  reportLine(out.str());
}

}  // namespace ronde::launcher
