#include "launcher/worker_settings_check.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "launcher/misspelt_settings.h"
#include "ronde/errors.h"

extern char** environ;

namespace ronde::launcher {
namespace {

// The folder a relative or absolute file name is in ("." for a bare name).
std::string folderOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void checkFolder(const char* setting, const std::string& path) {
  const std::string folder = folderOf(path);
  struct stat info {};
  if (::stat(folder.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) return;
  throw makeError(ErrorCode::kInvalidArgument, Settings::variableName(setting), "='", path,
                  "': the folder ", folder, " does not exist");
}

}  // namespace

Settings checkWorkerSettings(const EnvList& variables) {
  return Settings::fromLookup([&](const std::string& name) -> const char* {
    for (auto it = variables.rbegin(); it != variables.rend(); ++it) {
      if (it->first == name) return it->second.c_str();
    }
    return std::getenv(name.c_str());
  });
}

Settings checkJobSettings(const EnvList& variables) {
  warnMisspeltSettings(environ, variables);
  return checkWorkerSettings(variables);
}

void checkOutputFolders(const Settings& settings) {
  if (!settings.timeline_path.empty() && settings.timeline_path != kDynamicTimeline) {
    checkFolder("TIMELINE", settings.timeline_path);
  }
  if (settings.autotune && !settings.autotune_log.empty()) {
    checkFolder("AUTOTUNE_LOG", settings.autotune_log);
  }
}

}  // namespace ronde::launcher
