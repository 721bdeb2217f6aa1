#include "launcher/config_file.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "launcher/yaml_document.h"
#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

enum class Type { kBool, kInteger, kNumber, kString };

// One key of Horovod's schema and the flag it stands for. A boolean key is `flag` when true
// and `flag_if_false` when false; `also` lists flags of the same setting that override it too.
struct Key {
  const char* section;  // "" for a top-level key
  const char* name;
  Type type;
  const char* flag;
  const char* flag_if_false = nullptr;
  std::vector<const char*> also = {};
};

const std::vector<Key>& schema() {
  static const std::vector<Key> keys = {
      {"", "controller", Type::kString, nullptr, nullptr, {"--gloo", "--mpi"}},
      {"params", "fusion_threshold_mb", Type::kNumber, "--fusion-threshold-mb"},
      {"params", "cycle_time_ms", Type::kNumber, "--cycle-time-ms"},
      {"params", "cache_capacity", Type::kInteger, "--cache-capacity"},
      {"params", "hierarchical_allreduce", Type::kBool, "--hierarchical-allreduce",
       "--no-hierarchical-allreduce"},
      {"params", "hierarchical_allgather", Type::kBool, "--hierarchical-allgather",
       "--no-hierarchical-allgather"},
      {"params", "torus_allreduce", Type::kBool, "--torus-allreduce", "--no-torus-allreduce"},
      {"autotune", "enabled", Type::kBool, "--autotune", "--no-autotune"},
      {"autotune", "log_file", Type::kString, "--autotune-log-file"},
      {"autotune", "warmup_samples", Type::kInteger, "--autotune-warmup-samples"},
      {"autotune", "steps_per_sample", Type::kInteger, "--autotune-steps-per-sample"},
      {"autotune", "bayes_opt_max_samples", Type::kInteger, "--autotune-bayes-opt-max-samples"},
      {"autotune", "gaussian_process_noise", Type::kNumber, "--autotune-gaussian-process-noise"},
      {"timeline", "filename", Type::kString, "--timeline-filename"},
      {"timeline", "mark_cycles", Type::kBool, "--timeline-mark-cycles",
       "--no-timeline-mark-cycles"},
      {"stall_check", "enabled", Type::kBool, "--stall-check", "--no-stall-check"},
      {"stall_check", "warning_time_seconds", Type::kNumber, "--stall-check-warning-time-seconds"},
      {"stall_check", "shutdown_time_seconds", Type::kNumber,
       "--stall-check-shutdown-time-seconds"},
      {"library_options", "mpi_threads_disable", Type::kBool, "--mpi-threads-disable",
       "--no-mpi-threads-disable"},
      {"library_options", "num_nccl_streams", Type::kInteger, "--num-nccl-streams"},
      {"library_options", "thread_affinity", Type::kInteger, "--thread-affinity"},
      {"library_options", "gloo_timeout_seconds", Type::kNumber, "--gloo-timeout-seconds"},
      {"logging", "level", Type::kString, "--log-level"},
      {"logging", "with_timestamp", Type::kBool, "--log-with-timestamp", "--log-without-timestamp",
       {"--log-hide-timestamp", "--no-log-hide-timestamp"}},
  };
  return keys;
}

// "a, b and c" of the keys `section` has ("" for the top level: the sections and controller).
std::string keysOf(const std::string& section) {
  std::vector<std::string> names;
  for (const Key& key : schema()) {
    std::string name;
    if (section.empty()) {
      name = key.section[0] == '\0' ? key.name : key.section;
    } else if (key.section == section) {
      name = key.name;
    } else {
      continue;
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  }
  return text;
}

bool isSection(const std::string& name) {
  for (const Key& key : schema()) {
    if (!name.empty() && key.section == name) return true;
  }
  return false;
}

// YAML 1.1's booleans, as PyYAML (Horovod's reader) takes them.
std::optional<bool> boolOf(const std::string& text) {
  static const std::map<std::string, bool> words = {
      {"true", true},   {"True", true},   {"TRUE", true},   {"yes", true},  {"Yes", true},
      {"YES", true},    {"on", true},     {"On", true},     {"ON", true},   {"false", false},
      {"False", false}, {"FALSE", false}, {"no", false},    {"No", false},  {"NO", false},
      {"off", false},   {"Off", false},   {"OFF", false}};
  auto found = words.find(text);
  if (found == words.end()) return std::nullopt;
  return found->second;
}

bool isInteger(const std::string& text) {
  static const std::regex integer(R"([-+]?[0-9]+)");
  return std::regex_match(text, integer);
}

bool isNumber(const std::string& text) {
  static const std::regex number(R"([-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?)");
  return std::regex_match(text, number);
}

const char* typeName(Type type) {
  switch (type) {
    case Type::kBool: return "a boolean (true or false)";
    case Type::kInteger: return "an integer";
    case Type::kNumber: return "a number";
    case Type::kString: return "a string";
  }
  return "?";
}

class Schema {
 public:
  explicit Schema(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(int line, const std::string& why) const {
    throw makeError(ErrorCode::kInvalidArgument, origin_, ":", line, ": ", why);
  }

  std::vector<ConfigEntry> read(const YamlNode& root);

 private:
  void checkUnique(const YamlNode& mapping, const std::string& section) const;
  void readSection(const std::string& section, const YamlNode& mapping);
  void readValue(const Key& key, const std::string& full_name, const YamlNode& value);
  const Key* find(const std::string& section, const std::string& name) const;

  std::string origin_;
  std::vector<ConfigEntry> entries_;
};

const Key* Schema::find(const std::string& section, const std::string& name) const {
  for (const Key& key : schema()) {
    if (key.section == section && key.name == name) return &key;
  }
  return nullptr;
}

// PyYAML keeps the last of two equal keys; a second one is a mistake worth saying.
void Schema::checkUnique(const YamlNode& mapping, const std::string& section) const {
  std::map<std::string, int> seen;
  for (const auto& [key, value] : mapping.entries) {
    if (key.kind != YamlNode::Kind::kScalar) {
      fail(key.line, "a key must be a name, not " + describeYamlNode(key));
    }
    auto [where, inserted] = seen.emplace(key.value, key.line);
    if (!inserted) {
      fail(key.line, (section.empty() ? "" : section + ".") + key.value +
                         " is given twice (first on line " + std::to_string(where->second) + ")");
    }
  }
}

std::vector<ConfigEntry> Schema::read(const YamlNode& root) {
  if (root.kind != YamlNode::Kind::kMapping) {
    fail(root.line, "expected a mapping of " + keysOf("") + ", not " + describeYamlNode(root));
  }
  checkUnique(root, "");
  for (const auto& [key, value] : root.entries) {
    if (const Key* top = find("", key.value)) {
      readValue(*top, key.value, value);
    } else if (isSection(key.value)) {
      readSection(key.value, value);
    } else {
      fail(key.line, "unknown key '" + key.value + "' (the file's keys are " + keysOf("") + ")");
    }
  }
  return std::move(entries_);
}

void Schema::readSection(const std::string& section, const YamlNode& mapping) {
  if (mapping.kind == YamlNode::Kind::kNull) return;  // "params:" alone sets nothing
  if (mapping.kind != YamlNode::Kind::kMapping) {
    fail(mapping.line, section + ": expected a mapping of " + keysOf(section) + ", not " +
                           describeYamlNode(mapping));
  }
  checkUnique(mapping, section);
  for (const auto& [key, value] : mapping.entries) {
    const Key* known = find(section, key.value);
    if (known == nullptr) {
      fail(key.line, "unknown key '" + section + "." + key.value + "' (" + section + " has " +
                         keysOf(section) + ")");
    }
    readValue(*known, section + "." + key.value, value);
  }
}

void Schema::readValue(const Key& key, const std::string& full_name, const YamlNode& value) {
  if (value.kind == YamlNode::Kind::kNull) return;  // set to nothing: as if absent (Horovod)
  const std::string& text = value.value;
  const bool plain = value.kind == YamlNode::Kind::kScalar && !value.quoted;
  std::optional<bool> truth = plain ? boolOf(text) : std::nullopt;
  bool fits = value.kind == YamlNode::Kind::kScalar;
  if (key.type == Type::kBool) fits = truth.has_value();
  if (key.type == Type::kInteger) fits = plain && isInteger(text);
  if (key.type == Type::kNumber) fits = plain && isNumber(text);
  if (!fits) {
    fail(value.line, full_name + ": expected " + typeName(key.type) + ", not " +
                         (value.quoted ? "the string '" + text + "'" : describeYamlNode(value)));
  }
  ConfigEntry entry{full_name, value.line, {}, {}};
  if (key.flag != nullptr) entry.overridden_by.push_back(key.flag);
  if (key.flag_if_false != nullptr) entry.overridden_by.push_back(key.flag_if_false);
  entry.overridden_by.insert(entry.overridden_by.end(), key.also.begin(), key.also.end());
  if (key.type == Type::kBool) {
    entry.args = {*truth ? key.flag : key.flag_if_false};
  } else if (key.flag == nullptr) {  // controller: horovodrun's --gloo or --mpi
    std::string controller = text;
    for (char& c : controller) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (controller != "gloo" && controller != "mpi") {
      fail(value.line, full_name + ": no such controller '" + text + "' (gloo or mpi)");
    }
    entry.args = {"--" + controller};
  } else {
    entry.args = {key.flag, text};
  }
  entries_.push_back(std::move(entry));
}

}  // namespace

std::vector<ConfigEntry> parseConfigText(const std::string& text, const std::string& origin) {
  std::optional<YamlNode> root = parseYamlDocument(text, origin);
  if (!root) return {};
  return Schema(origin).read(*root);
}

std::vector<ConfigEntry> readConfigFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    throw makeError(ErrorCode::kInvalidArgument, "--config-file ", path, ": cannot read");
  }
  std::stringstream contents;
  contents << file.rdbuf();
  return parseConfigText(contents.str(), path);
}

}  // namespace ronde::launcher
