#include "launcher/launcher_messages.h"

#include <unistd.h>

namespace ronde::launcher {

void reportLine(const std::string& line) {
  std::string text = "ronde run: " + line + "\n";
  (void)!::write(STDERR_FILENO, text.data(), text.size());
}

}  // namespace ronde::launcher
