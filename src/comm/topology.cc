#include "comm/topology.h"

#include <map>

namespace ronde {

bool Topology::homogeneous() const {
  for (const auto& ranks : by_host) {
    if (ranks.size() != by_host.front().size()) return false;
  }
  return true;
}

std::string Topology::name(int r) const {
  const int label = labels.empty() ? r : labels[static_cast<size_t>(r)];
  return "rank " + std::to_string(label) + " (host " + hosts[static_cast<size_t>(r)] + ")";
}

Topology Topology::fromHosts(int rank, std::vector<std::string> hosts) {
  Topology t;
  t.rank = rank;
  t.size = static_cast<int>(hosts.size());
  t.hosts = std::move(hosts);
  std::map<std::string, int> index;
  for (int r = 0; r < t.size; ++r) {
    auto [it, added] = index.emplace(t.hosts[static_cast<size_t>(r)], static_cast<int>(index.size()));
    if (added) t.by_host.emplace_back();
    t.host_index.push_back(it->second);
    t.local_rank_of.push_back(static_cast<int>(t.by_host[static_cast<size_t>(it->second)].size()));
    t.by_host[static_cast<size_t>(it->second)].push_back(r);
  }
  return t;
}

Topology Topology::gather(Store& store, int rank, int size, const std::string& hostname,
                          Deadline deadline) {
  store.setString("host/" + std::to_string(rank), hostname);
  std::vector<std::string> hosts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    auto left = std::chrono::duration_cast<Duration>(deadline.at() - Deadline::Clock::now());
    try {
      hosts[static_cast<size_t>(r)] =
          store.getString("host/" + std::to_string(r), std::max(left, Duration(1)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
      throw makeError(ErrorCode::kTimeout, "rank ", r, " of ", size,
                      " did not join the job in time (start timeout; is it running, and does it "
                      "use the same rendezvous store?)");
    }
  }
  return fromHosts(rank, std::move(hosts));
}

}  // namespace ronde
