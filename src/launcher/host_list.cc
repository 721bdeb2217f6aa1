#include "launcher/host_list.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

std::string trim(const std::string& text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

// "host" or "user@host": one '@' at most, and a name on each side of it.
bool validHostName(const std::string& name) {
  size_t at = name.find('@');
  if (at != std::string::npos && (at == 0 || at + 1 == name.size() ||
                                  name.find('@', at + 1) != std::string::npos)) {
    return false;
  }
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           c == '@';
  });
}

// The text as a message can show it whole: a NUL or another control byte would cut a
// terminal's line short or hide itself, so each is written as \xNN.
std::string visible(const std::string& text) {
  std::string shown;
  for (char c : text) {
    unsigned char byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      shown += c;
      continue;
    }
    const char* digits = "0123456789abcdef";
    shown += std::string("\\x") + digits[byte >> 4] + digits[byte & 0xf];
  }
  return shown;
}

// Slot counts are small positive decimals; anything else is a typo worth reporting.
int parseSlots(const std::string& text, const std::string& context) {
  bool digits = !text.empty() && text.size() <= 6 &&
                std::all_of(text.begin(), text.end(),
                            [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  int value = digits ? std::stoi(text) : 0;
  if (value <= 0) {
    throw makeError(ErrorCode::kInvalidArgument, context, ": slot count '", text,
                    "' is not a positive integer");
  }
  return value;
}

void checkHostName(const std::string& name, const std::string& context) {
  if (name.empty()) throw makeError(ErrorCode::kInvalidArgument, context, ": empty host name");
  if (!validHostName(name)) {
    throw makeError(ErrorCode::kInvalidArgument, context, ": '", visible(name),
                    "' is not a valid host name");
  }
}

// A host named twice would get two disjoint groups of local ranks: refuse it.
void checkUnique(const std::vector<HostSlots>& hosts, const std::string& context) {
  std::set<std::string> seen;
  for (const HostSlots& host : hosts) {
    if (!seen.insert(host.name).second) {
      throw makeError(ErrorCode::kInvalidArgument, context, ": host '", host.name,
                      "' is listed more than once");
    }
  }
}

}  // namespace

std::vector<HostSlots> parseHostList(const std::string& text) {
  std::vector<HostSlots> hosts;
  if (trim(text).empty()) {
    throw makeError(ErrorCode::kInvalidArgument, "-H '", text, "': empty host list");
  }
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    std::string entry = trim(item);
    std::string context = "-H " + entry;
    if (entry.empty()) {
      throw makeError(ErrorCode::kInvalidArgument, "-H ", text, ": empty entry (stray comma?)");
    }
    HostSlots host;
    size_t colon = entry.find(':');
    host.name = entry.substr(0, colon);
    checkHostName(host.name, context);
    host.slots = colon == std::string::npos ? 1 : parseSlots(entry.substr(colon + 1), context);
    hosts.push_back(host);
  }
  if (!text.empty() && text.back() == ',') {
    throw makeError(ErrorCode::kInvalidArgument, "-H ", text, ": empty entry (stray comma?)");
  }
  checkUnique(hosts, "-H " + text);
  return hosts;
}

std::vector<HostSlots> parseHostFile(const std::string& contents, const std::string& origin) {
  std::vector<HostSlots> hosts;
  std::stringstream lines(contents);
  std::string line;
  int line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    std::string context = origin + ":" + std::to_string(line_number);
    if (line.find('\0') != std::string::npos) {
      throw makeError(ErrorCode::kInvalidArgument, context, ": the line '", visible(line),
                      "' has a NUL byte");
    }
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::stringstream words(line);
    HostSlots host;
    words >> host.name;
    checkHostName(host.name, context);
    host.slots = 1;
    bool slots_given = false;
    std::string word;
    while (words >> word) {
      // "slots=4" as horovodrun and OpenMPI write it; "max_slots=" is OpenMPI's, ignored.
      if (word.rfind("slots=", 0) == 0) {
        if (slots_given) {
          throw makeError(ErrorCode::kInvalidArgument, context, ": slots given twice ('",
                          visible(line), "')");
        }
        slots_given = true;
        host.slots = parseSlots(word.substr(6), context);
      } else if (word.rfind("max_slots=", 0) != 0) {
        throw makeError(ErrorCode::kInvalidArgument, context, ": unexpected '", visible(word),
                        "' (expected 'host slots=N')");
      }
    }
    hosts.push_back(host);
  }
  if (hosts.empty()) throw makeError(ErrorCode::kInvalidArgument, origin, ": no hosts listed");
  checkUnique(hosts, origin);
  return hosts;
}

std::vector<HostSlots> readHostFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw makeError(ErrorCode::kInvalidArgument, "--hostfile ", path, ": cannot read");
  std::stringstream contents;
  contents << file.rdbuf();
  return parseHostFile(contents.str(), path);
}

std::vector<RankPlacement> placeRanks(const std::vector<HostSlots>& hosts, int num_ranks) {
  if (num_ranks <= 0) {
    throw makeError(ErrorCode::kInvalidArgument, "-np ", num_ranks,
                    ": the number of ranks must be positive");
  }
  // 64 bits: a big hostfile's slots (up to 999999 each) can add up past INT_MAX.
  int64_t total_slots = 0;
  for (const HostSlots& host : hosts) total_slots += host.slots;
  if (num_ranks > total_slots) {
    throw makeError(ErrorCode::kInvalidArgument, "-np ", num_ranks, ": more ranks than slots (",
                    total_slots, " slot", total_slots == 1 ? "" : "s", " on ", hosts.size(),
                    " host", hosts.size() == 1 ? "" : "s", ")");
  }

  std::vector<RankPlacement> placements;
  // Hosts that have a rank at each local rank, in host order: the cross communicators.
  std::map<int, std::vector<std::string>> hosts_at_local_rank;
  for (const HostSlots& host : hosts) {
    int local_size = std::min(host.slots, num_ranks - static_cast<int>(placements.size()));
    for (int local_rank = 0; local_rank < local_size; ++local_rank) {
      RankPlacement placement;
      placement.host = host.name;
      placement.rank = static_cast<int>(placements.size());
      placement.size = num_ranks;
      placement.local_rank = local_rank;
      placement.local_size = local_size;
      placement.cross_rank = static_cast<int>(hosts_at_local_rank[local_rank].size());
      hosts_at_local_rank[local_rank].push_back(host.name);
      placements.push_back(placement);
    }
  }
  for (RankPlacement& placement : placements) {
    placement.cross_size = static_cast<int>(hosts_at_local_rank[placement.local_rank].size());
  }
  return placements;
}

}  // namespace ronde::launcher
