// The registry of process sets: id -> sorted world ranks. Set 0 is the whole world. Every
// rank holds the same registry because sets change only when a negotiated add or remove runs,
// at the same point of the same cycle everywhere. Thread-safe: enqueue reads it from any
// thread while the background thread changes it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ronde::runtime {

class ProcessSets {
 public:
  explicit ProcessSets(int world_size);

  // The set's ranks, or null when there is no set `id`. Shared, not copied: every request's
  // enqueue asks, and a set's ranks never change (remove drops the registry's reference).
  std::shared_ptr<const std::vector<int>> ranks(int id) const;
  int add(const std::vector<int>& ranks);  // returns the new id
  void remove(int id);

  // "" when `ranks` can form a set of this world, else why not.
  static std::string validate(const std::vector<int>& ranks, int world_size);

 private:
  mutable std::mutex mutex_;
  std::map<int, std::shared_ptr<const std::vector<int>>> sets_;  // guarded by mutex_
  int next_id_ = 1;                                              // guarded by mutex_
};

// Position of `rank` in `members`, or -1.
int indexIn(const std::vector<int>& members, int rank);

}  // namespace ronde::runtime
