#include "runtime/response_cache.h"

namespace ronde::runtime {

ResponseCache::ResponseCache(int capacity)
    : slots_(static_cast<size_t>(capacity > 0 ? capacity : 0)) {}

int ResponseCache::find(const RequestKey& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? -1 : it->second;
}

const Response* ResponseCache::at(int slot) const {
  const auto& entry = slots_[static_cast<size_t>(slot)];
  return entry ? &entry->response : nullptr;
}

bool ResponseCache::matches(int slot, int rank, const Descriptor& descriptor) const {
  const Response* r = at(slot);
  if (r == nullptr) return false;
  const auto& mine = r->agreement->per_rank[static_cast<size_t>(rank)];
  return mine && *mine == descriptor;
}

bool ResponseCache::cacheable(const Response& response) {
  if (!response.error.empty()) return false;
  const Descriptor& d = response.descriptor();
  if (d.kind > static_cast<uint8_t>(RequestKind::kBarrier)) return false;
  for (int m : response.members) {
    if (!response.agreement->per_rank[static_cast<size_t>(m)]) return false;  // a joined rank
  }
  return true;
}

std::vector<RequestKey> ResponseCache::put(const Response& response) {
  std::vector<RequestKey> invalidated;
  if (slots_.empty()) return invalidated;
  int slot = find(response.key);
  if (slot >= 0) {
    invalidated.push_back(response.key);
  } else {
    uint64_t oldest = UINT64_MAX;
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (!slots_[s]) {
        slot = static_cast<int>(s);
        break;
      }
      if (slots_[s]->last_used < oldest) {
        oldest = slots_[s]->last_used;
        slot = static_cast<int>(s);
      }
    }
    auto& victim = slots_[static_cast<size_t>(slot)];
    if (victim) {
      invalidated.push_back(victim->response.key);
      index_.erase(victim->response.key);
    }
  }
  Entry entry{response, ++clock_};
  entry.response.cache_slot = slot;
  entry.response.result.clear();
  slots_[static_cast<size_t>(slot)] = std::move(entry);
  index_[response.key] = slot;
  if (slot + 1 > high_water_) high_water_ = slot + 1;
  return invalidated;
}

std::vector<RequestKey> ResponseCache::dropProcessSet(int id) {
  std::vector<RequestKey> dropped;
  for (auto& slot : slots_) {
    if (slot && slot->response.key.first == id) {
      dropped.push_back(slot->response.key);
      index_.erase(slot->response.key);
      slot.reset();
    }
  }
  return dropped;
}

}  // namespace ronde::runtime
