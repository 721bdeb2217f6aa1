#include "launcher/misspelt_settings.h"

#include <algorithm>
#include <set>
#include <vector>

#include "launcher/launcher_messages.h"
#include "ronde/settings.h"

namespace ronde::launcher {
namespace {

const std::string kPrefix = "RONDE_";

// Levenshtein distance: insertions, deletions and substitutions of one character each.
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string nearestSettingName(const std::string& name) {
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return "";
  const std::string suffix = name.substr(kPrefix.size());
  // Close enough to be a typo: one edit in a short name, up to three in a long one. Other
  // RONDE_* variables (a script's own) are left alone.
  const size_t allowed = std::clamp<size_t>(suffix.size() / 4, 1, 3);
  std::string best;
  size_t best_distance = allowed + 1;
  for (const Settings::Doc& doc : Settings::documentation()) {
    if (doc.name == suffix) return "";
    size_t distance = editDistance(suffix, doc.name);
    if (distance < best_distance) {
      best_distance = distance;
      best = kPrefix + doc.name;
    }
  }
  return best;
}

void warnMisspeltSettings(char* const* environ, const EnvList& variables) {
  std::set<std::string> names;
  for (char* const* entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string text(*entry);
    names.insert(text.substr(0, text.find('=')));
  }
  for (const auto& entry : variables) names.insert(entry.first);
  for (const std::string& name : names) {
    std::string nearest = nearestSettingName(name);
    if (!nearest.empty()) {
      report("warning: ", name, " is not a setting of ronde and is ignored; did you mean ",
             nearest, "?");
    }
  }
}

}  // namespace ronde::launcher
