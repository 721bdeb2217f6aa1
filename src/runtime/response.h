// What negotiation decides for one request: every rank's announcement, and whether it may run.
// Every rank computes the same list of responses, in the same order, from the same messages.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/descriptor.h"

namespace ronde::runtime {

using RequestKey = std::pair<int32_t, std::string>;  // process set, name

// What names a request among the in-flight ones: its tensor, whatever kind it is submitted as.
inline RequestKey tensorKey(const Descriptor& d) {
  return {d.process_set, tensorName(d.name, d.kind)};
}

// For the hashed containers keyed by request: the runtime's in-flight names and pending requests.
struct RequestKeyHash {
  size_t operator()(const RequestKey& key) const noexcept {
    return std::hash<std::string>{}(key.second) ^
           (static_cast<size_t>(key.first) * 0x9e3779b97f4a7c15ULL);
  }
};

// The ranks' announcements of one request, indexed by world rank; empty for ranks that did
// not submit it (non-members of its process set, joined ranks).
struct Agreement {
  std::vector<std::optional<Descriptor>> per_rank;
  const Descriptor& first() const {
    for (const auto& d : per_rank) {
      if (d) return *d;
    }
    RONDE_CHECK(false, "an agreement without any announcement");
  }
};

struct Response {
  RequestKey key;
  std::shared_ptr<const Agreement> agreement;
  std::vector<int> members;  // world ranks of the process set, sorted
  std::string error;         // non-empty: fails on every member with error_code
  ErrorCode error_code = ErrorCode::kMismatch;
  std::vector<int64_t> result;  // join: {last rank to join}
  int cache_slot = -1;          // the response came from (or was put into) this cache slot

  const Descriptor& descriptor() const { return agreement->first(); }
};

}  // namespace ronde::runtime
