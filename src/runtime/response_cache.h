// The response cache: once a request has run, its agreement (every rank's announcement) gets a
// slot. When a rank submits it again with the same announcement, it sends only the slot's bit:
// one small allreduce (min over bytes = AND) per cycle replaces the gather of announcements.
// Every rank holds the same cache, because it changes only in response to negotiated results,
// in the same order everywhere; eviction is least-recently-used with a replicated clock.
// Used by the background thread only.
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "runtime/response.h"

namespace ronde::runtime {

class ResponseCache {
 public:
  explicit ResponseCache(int capacity);

  int capacity() const { return static_cast<int>(slots_.size()); }
  // One past the highest slot ever used: the length of the bit vector.
  int highWater() const { return high_water_; }
  int find(const RequestKey& key) const;
  // The cached response in `slot`, or null for an empty slot.
  const Response* at(int slot) const;
  bool matches(int slot, int rank, const Descriptor& descriptor) const;

  // Whether a successful response can be cached at all.
  static bool cacheable(const Response& response);
  // Caches (or refreshes) `response`; returns the keys whose slots were replaced or evicted,
  // whose waiting requests must now take the full path.
  std::vector<RequestKey> put(const Response& response);
  void touch(int slot) {
    if (slots_[static_cast<size_t>(slot)]) slots_[static_cast<size_t>(slot)]->last_used = ++clock_;
  }
  std::vector<RequestKey> dropProcessSet(int id);

 private:
  struct Entry {
    Response response;
    uint64_t last_used = 0;
  };
  std::vector<std::optional<Entry>> slots_;
  std::map<RequestKey, int> index_;
  uint64_t clock_ = 0;
  int high_water_ = 0;
};

}  // namespace ronde::runtime
