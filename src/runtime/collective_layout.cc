#include "runtime/collective_layout.h"

namespace ronde::runtime {
namespace {

// Member i's announcement; null for a rank that did not submit (joined).
const std::optional<Descriptor>& announced(const Response& r, size_t i) {
  return r.agreement->per_rank[static_cast<size_t>(r.members[i])];
}

}  // namespace

int64_t firstDim(const Descriptor& d) { return d.shape.empty() ? 1 : d.shape[0]; }

std::vector<int64_t> withFirstDim(const Descriptor& d, int64_t rows) {
  std::vector<int64_t> shape = d.shape;
  if (shape.empty()) return {rows};
  shape[0] = rows;
  return shape;
}

GatherLayout gatherLayout(const Response& r) {
  const size_t row = static_cast<size_t>(r.descriptor().rowElements());
  GatherLayout layout;
  layout.counts.assign(r.members.size(), 0);
  for (size_t i = 0; i < r.members.size(); ++i) {
    const auto& d = announced(r, i);
    if (!d) continue;
    layout.counts[i] = static_cast<size_t>(firstDim(*d)) * row;
    layout.rows += firstDim(*d);
  }
  return layout;
}

FusedGatherLayout fusedGatherLayout(const std::vector<const Response*>& responses) {
  const size_t members = responses[0]->members.size();
  FusedGatherLayout layout;
  layout.elements.assign(responses.size(), std::vector<size_t>(members, 0));
  layout.counts.assign(members, 0);
  layout.rows.assign(responses.size(), 0);
  for (size_t k = 0; k < responses.size(); ++k) {
    for (size_t i = 0; i < members; ++i) {
      const auto& d = announced(*responses[k], i);
      if (!d) continue;
      layout.elements[k][i] = static_cast<size_t>(d->numel());
      layout.counts[i] += layout.elements[k][i];
      layout.rows[k] += firstDim(*d);
    }
  }
  for (size_t c : layout.counts) layout.total += c;
  return layout;
}

AlltoallLayout alltoallLayout(const Response& r, int me) {
  const size_t row = static_cast<size_t>(r.descriptor().rowElements());
  const size_t k = r.members.size();
  // Rows member i sends to each member: its splits, or its first dimension divided evenly.
  auto splitsOf = [&](size_t i) {
    const Descriptor& d = *announced(r, i);
    if (!d.splits.empty()) return d.splits;
    return std::vector<int64_t>(k, firstDim(d) / static_cast<int64_t>(k));
  };
  AlltoallLayout layout;
  layout.send.assign(k, 0);
  layout.recv.assign(k, 0);
  layout.received_rows.assign(k, 0);
  const std::vector<int64_t> mine = splitsOf(static_cast<size_t>(me));
  for (size_t j = 0; j < k; ++j) {
    layout.send[j] = static_cast<size_t>(mine[j]) * row;
    const int64_t got = splitsOf(j)[static_cast<size_t>(me)];
    layout.recv[j] = static_cast<size_t>(got) * row;
    layout.received_rows[j] = got;
    layout.rows += got;
  }
  return layout;
}

ScatterLayout scatterLayout(const Response& r, int me) {
  const Descriptor& d = r.descriptor();
  const size_t row = static_cast<size_t>(d.rowElements());
  const int64_t n = firstDim(d);
  const auto k = static_cast<int64_t>(r.members.size());
  ScatterLayout layout;
  layout.counts.assign(r.members.size(), 0);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t rows = n / k + (i < n % k ? 1 : 0);
    layout.counts[static_cast<size_t>(i)] = static_cast<size_t>(rows) * row;
    if (i == me) layout.my_rows = rows;
  }
  return layout;
}

FusedScatterLayout fusedScatterLayout(const std::vector<const Response*>& responses, int me) {
  const size_t members = responses[0]->members.size();
  FusedScatterLayout layout;
  layout.counts.assign(members, 0);
  for (const Response* r : responses) {
    ScatterLayout one = scatterLayout(*r, me);
    std::vector<size_t> offsets(members, 0);
    for (size_t i = 1; i < members; ++i) offsets[i] = offsets[i - 1] + one.counts[i - 1];
    for (size_t i = 0; i < members; ++i) layout.counts[i] += one.counts[i];
    layout.elements.push_back(std::move(one.counts));
    layout.offsets.push_back(std::move(offsets));
    layout.my_rows.push_back(one.my_rows);
  }
  for (size_t c : layout.counts) layout.total += c;
  return layout;
}

}  // namespace ronde::runtime
