#include "runtime/process_sets.h"

#include <algorithm>

namespace ronde::runtime {

ProcessSets::ProcessSets(int world_size) {
  std::vector<int> all(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) all[static_cast<size_t>(r)] = r;
  sets_[0] = std::make_shared<const std::vector<int>>(std::move(all));
}

std::shared_ptr<const std::vector<int>> ProcessSets::ranks(int id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return nullptr;
  return it->second;
}

int ProcessSets::add(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::lock_guard<std::mutex> lock(mutex_);
  int id = next_id_++;
  sets_[id] = std::make_shared<const std::vector<int>>(std::move(sorted));
  return id;
}

void ProcessSets::remove(int id) {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.erase(id);
}

std::string ProcessSets::validate(const std::vector<int>& ranks, int world_size) {
  if (ranks.empty()) return "a process set needs at least one rank";
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= world_size) {
      return "rank " + std::to_string(sorted[i]) + " is outside the world of " +
             std::to_string(world_size);
    }
    if (i > 0 && sorted[i] == sorted[i - 1])
      return "rank " + std::to_string(sorted[i]) + " appears twice";
  }
  return "";
}

int indexIn(const std::vector<int>& members, int rank) {
  auto it = std::lower_bound(members.begin(), members.end(), rank);
  if (it == members.end() || *it != rank) return -1;
  return static_cast<int>(it - members.begin());
}

}  // namespace ronde::runtime
