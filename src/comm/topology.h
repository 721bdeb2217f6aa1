// Where every rank runs: gathered through the store at init, so that every rank derives the
// same local ranks, host indices and the ordering of the cross-host groups.
#pragma once

#include <string>
#include <vector>

#include "common/deadline.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {

struct Topology {
  int rank = 0;
  int size = 1;
  std::vector<std::string> hosts;        // host of every rank
  std::vector<int> host_index;           // index of each rank's host, by first appearance
  std::vector<int> local_rank_of;        // each rank's index among the ranks on its host
  std::vector<std::vector<int>> by_host; // ranks of each host, ascending
  std::vector<int> labels;               // CommOptions::rank_labels: the rank name() says

  int localRank() const { return local_rank_of[static_cast<size_t>(rank)]; }
  int localSize() const { return static_cast<int>(by_host[static_cast<size_t>(crossRank())].size()); }
  int crossRank() const { return host_index[static_cast<size_t>(rank)]; }
  int crossSize() const { return static_cast<int>(by_host.size()); }
  // Every host runs the same number of ranks (hierarchical algorithms need it).
  bool homogeneous() const;
  std::string name(int r) const;  // "rank 3 (host b)"

  static Topology fromHosts(int rank, std::vector<std::string> hosts);
  static Topology gather(Store& store, int rank, int size, const std::string& hostname,
                         Deadline deadline);
};

}  // namespace ronde
