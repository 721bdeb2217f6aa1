// Adasum by its definition, for tests: the pairwise formula applied along the binary tree of
// ranks, after a sum within each host where ranks are grouped by host. Plain loops in double,
// sharing no code with src/collectives/adasum.cc.
#pragma once

#include <cstddef>
#include <vector>

namespace ronde::testing {

using AdasumVector = std::vector<double>;

// The formula, as Horovod's tests state it: a' = (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b.
inline AdasumVector adasumPair(const AdasumVector& a, const AdasumVector& b) {
  double dot = 0, an = 0, bn = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    an += a[i] * a[i];
    bn += b[i] * b[i];
  }
  const double ca = an == 0 ? 1.0 : 1.0 - dot / (2 * an);
  const double cb = bn == 0 ? 1.0 : 1.0 - dot / (2 * bn);
  AdasumVector out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Combines (0,1), (2,3), ... then the results pairwise, to one vector (a power of two of them).
inline AdasumVector adasumTree(std::vector<AdasumVector> level) {
  while (level.size() > 1) {
    std::vector<AdasumVector> next;
    for (size_t i = 0; i < level.size(); i += 2) next.push_back(adasumPair(level[i], level[i + 1]));
    level = next;
  }
  return level[0];
}

// The result for ranks whose vectors are `per_rank`, `per_host` consecutive ranks to a host:
// each host's sum, then the tree across hosts.
inline AdasumVector adasumOfHosts(const std::vector<AdasumVector>& per_rank, size_t per_host) {
  std::vector<AdasumVector> hosts;
  for (size_t first = 0; first < per_rank.size(); first += per_host) {
    AdasumVector sum(per_rank[first].size(), 0.0);
    for (size_t r = first; r < first + per_host; ++r) {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += per_rank[r][i];
    }
    hosts.push_back(sum);
  }
  return adasumTree(hosts);
}

}  // namespace ronde::testing
