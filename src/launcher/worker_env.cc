#include "launcher/worker_env.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "ronde/errors.h"
#include "ronde/settings.h"

namespace ronde::launcher {
void setVariable(EnvList* env, const std::string& name, const std::string& value) {
  for (auto& entry : *env) {
    if (entry.first == name) {
      entry.second = value;
      return;
    }
  }
  env->emplace_back(name, value);
}

namespace {

bool hasPrefix(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

bool isValidVariableName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

EnvList workerVariables(const RankPlacement& placement, const std::string& hostname,
                        const std::string& store_address, const JobEnvironment& job) {
  EnvList env;
  const std::pair<const char*, int> identity[] = {
      {"RANK", placement.rank},
      {"SIZE", placement.size},
      {"LOCAL_RANK", placement.local_rank},
      {"LOCAL_SIZE", placement.local_size},
      {"CROSS_RANK", placement.cross_rank},
      {"CROSS_SIZE", placement.cross_size},
  };
  for (const auto& [name, value] : identity) {
    setVariable(&env, Settings::variableName(name), std::to_string(value));
  }
  // Horovod scripts read their own names; the values are the same.
  for (const auto& [name, value] : identity) {
    setVariable(&env, std::string("HOROVOD_") + name, std::to_string(value));
  }
  setVariable(&env, Settings::variableName("HOSTNAME"), hostname);
  setVariable(&env, Settings::variableName("STORE_ADDRESS"), store_address);
  setVariable(&env, Settings::variableName("SECRET"), job.secret);
  if (!job.network_interface.empty()) {
    setVariable(&env, Settings::variableName("INTERFACE"), job.network_interface);
  }
  for (const auto& [name, value] : job.settings) setVariable(&env, name, value);
  for (const auto& [name, value] : job.passed) setVariable(&env, name, value);
  return env;
}

EnvList resolvePassedVariables(const std::vector<std::string>& requests, const EnvLookup& lookup) {
  EnvList env;
  for (const std::string& request : requests) {
    size_t equals = request.find('=');
    std::string name = request.substr(0, equals);
    if (!isValidVariableName(name)) {
      throw makeError(ErrorCode::kInvalidArgument, "-x ", request, ": '", name,
                      "' is not a valid environment variable name");
    }
    if (equals != std::string::npos) {
      setVariable(&env, name, request.substr(equals + 1));
      continue;
    }
    const char* value = lookup(name);
    if (value == nullptr) {
      throw makeError(ErrorCode::kInvalidArgument, "-x ", name, ": ", name,
                      " is not set here; write -x ", name, "=VALUE to give it a value");
    }
    setVariable(&env, name, value);
  }
  return env;
}

std::vector<std::string> mergeEnvironment(char* const* environ, const EnvList& overrides) {
  std::set<std::string> overridden;
  for (const auto& entry : overrides) overridden.insert(entry.first);
  std::vector<std::string> merged;
  for (char* const* entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string text(*entry);
    if (overridden.count(text.substr(0, text.find('='))) == 0) merged.push_back(text);
  }
  for (const auto& [name, value] : overrides) merged.push_back(name + "=" + value);
  return merged;
}

EnvList forwardedSettings(char* const* environ, const EnvList& ours) {
  std::set<std::string> set_by_us;
  for (const auto& entry : ours) set_by_us.insert(entry.first);
  EnvList forwarded;
  for (char* const* entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string text(*entry);
    size_t equals = text.find('=');
    if (equals == std::string::npos) continue;
    std::string name = text.substr(0, equals);
    if (!hasPrefix(name, "RONDE_") && !hasPrefix(name, "HOROVOD_")) continue;
    if (set_by_us.count(name) != 0 || !isValidVariableName(name)) continue;
    forwarded.emplace_back(name, text.substr(equals + 1));
  }
  return forwarded;
}

}  // namespace ronde::launcher
