#include "runtime/negotiation_table.h"

#include <algorithm>

namespace ronde::runtime {

namespace {
constexpr uint8_t kAllreduce = static_cast<uint8_t>(RequestKind::kAllreduce);
constexpr uint8_t kJoin = static_cast<uint8_t>(RequestKind::kJoin);
}  // namespace

NegotiationTable::NegotiationTable(int world_size)
    : world_size_(world_size), joined_(static_cast<size_t>(world_size), false) {}

bool NegotiationTable::anyJoined() const {
  return std::find(joined_.begin(), joined_.end(), true) != joined_.end();
}

void NegotiationTable::announce(int rank, Descriptor descriptor, Clock::time_point now) {
  if (descriptor.kind == kJoin) {
    joined_[static_cast<size_t>(rank)] = true;
    last_joined_ = rank;
  }
  RequestKey key{descriptor.process_set, descriptor.name};
  auto found = entries_.find(key);
  if (found != entries_.end()) {
    if (found->second.per_rank[static_cast<size_t>(rank)]) {
      // The rank's next request of a name it has one waiting for: a refusal notice behind its
      // real request, or its real request behind a notice. A notice counts as the rank's turn
      // of that name (the peers' request of the same turn fails with it), so whichever came
      // first, the later one waits for the next turn. Deterministic: taking the notice's
      // place instead made a peer's request meet either, as the race went.
      deferred_[key].push_back({rank, std::move(descriptor), now});
      return;
    }
  }
  auto [it, inserted] = entries_.try_emplace(key);
  if (inserted) {
    it->second.tensor = {descriptor.process_set, tensorName(descriptor.name, descriptor.kind)};
    ++entries_per_tensor_[it->second.tensor];
    it->second.per_rank.resize(static_cast<size_t>(world_size_));
    it->second.seq = next_seq_++;
    it->second.since = now;
  }
  it->second.per_rank[static_cast<size_t>(rank)] = std::move(descriptor);
}

bool NegotiationTable::announced(const Descriptor& d) const {
  RequestKey key{d.process_set, d.name};
  return entries_.count(key) != 0 ||
         entries_per_tensor_.count({d.process_set, tensorName(d.name, d.kind)}) != 0;
}

std::map<RequestKey, std::string> NegotiationTable::nameConflicts(const ProcessSets& sets) const {
  std::map<RequestKey, std::vector<const Entry*>> by_tensor;
  for (const auto& [key, entry] : entries_) {
    if (entries_per_tensor_.at(entry.tensor) < 2) continue;
    auto members = sets.ranks(key.first);
    if (!members || readiness(entry, &*members) != Readiness::kWaiting) continue;
    by_tensor[entry.tensor].push_back(&entry);
  }
  std::map<RequestKey, std::string> conflicts;
  for (const auto& [tensor, entries] : by_tensor) {
    if (entries.size() < 2) continue;
    // Each member's announcement of the tensor, under whichever name it used. A rank has one
    // request per tensor in flight (the runtime refuses a second), so a member that announced
    // one name will never announce another while this one waits: none can ever be ready.
    std::vector<std::optional<Descriptor>> merged(static_cast<size_t>(world_size_));
    for (const Entry* e : entries) {
      for (size_t r = 0; r < merged.size(); ++r) {
        if (e->per_rank[r] && !merged[r]) merged[r] = e->per_rank[r];
      }
    }
    bool everyone = true;
    const std::vector<int> members = *sets.ranks(tensor.first);
    for (int m : members) {
      if (!merged[static_cast<size_t>(m)] && !joined_[static_cast<size_t>(m)]) everyone = false;
    }
    if (!everyone) continue;
    std::string names;
    for (size_t r = 0; r < merged.size(); ++r) {
      if (!merged[r]) continue;
      names += (names.empty() ? "" : ", ") + ("rank " + std::to_string(r)) + " '" +
               merged[r]->name + "'";
      merged[r]->name = tensor.second;
    }
    std::string message = findMismatch(merged);
    if (message.empty()) message = "tensor '" + tensor.second + "': name mismatch between ranks";
    conflicts[tensor] = message + " (announced as " + names + ")";
  }
  return conflicts;
}

NegotiationTable::Readiness NegotiationTable::readiness(const Entry& entry,
                                                        const std::vector<int>* members) const {
  if (members == nullptr) return Readiness::kNoSet;
  uint8_t kind = 0;
  for (const auto& d : entry.per_rank) {
    if (d) kind = d->kind;
  }
  bool missing = false;
  for (int m : *members) {
    if (entry.per_rank[static_cast<size_t>(m)]) continue;
    if (kind != kJoin && joined_[static_cast<size_t>(m)]) {
      // A joined rank waits in join until every rank joined: it never submits this request.
      // Only allreduce runs without it; any other kind fails now, on every rank that
      // submitted it, without waiting for the other active ranks, whose names may not match
      // this one (a rank that fails here must not hang on a peer that got out of step).
      if (kind != kAllreduce) return Readiness::kBlockedByJoin;
      continue;
    }
    missing = true;
  }
  return missing ? Readiness::kWaiting : Readiness::kReady;
}

std::vector<Response> NegotiationTable::takeReady(const ProcessSets& sets) {
  struct Candidate {
    std::map<RequestKey, Entry>::iterator it;
    Readiness readiness;
    std::vector<int> members;
  };
  std::vector<Candidate> candidates;
  // (process set, group) -> members decided: ready, failing now, or failed in earlier cycles
  std::map<RequestKey, int> group_ready = group_failed_;
  const std::map<RequestKey, std::string> conflicts = nameConflicts(sets);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    auto members = sets.ranks(it->first.first);
    Readiness r = readiness(it->second, members ? &*members : nullptr);
    if (r == Readiness::kWaiting && conflicts.count(it->second.tensor)) {
      r = Readiness::kNameConflict;
    }
    if (r == Readiness::kWaiting) continue;
    const Descriptor* first = nullptr;
    for (const auto& d : it->second.per_rank) {
      if (d && !first) first = &*d;
    }
    if (!first->group.empty()) ++group_ready[{it->first.first, first->group}];
    candidates.push_back({it, r, members ? *members : std::vector<int>{}});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.it->second.seq < b.it->second.seq;
  });

  std::vector<Response> ready;
  bool join_done = false;
  for (Candidate& c : candidates) {
    auto agreement = std::make_shared<Agreement>();
    agreement->per_rank = std::move(c.it->second.per_rank);
    const Descriptor& d = agreement->first();
    if (c.readiness == Readiness::kReady && !d.group.empty() &&
        group_ready[{c.it->first.first, d.group}] < d.group_size) {
      c.it->second.per_rank = std::move(agreement->per_rank);  // the group is not complete yet
      continue;
    }
    Response response;
    response.key = c.it->first;
    response.members = std::move(c.members);
    if (c.readiness == Readiness::kNoSet) {
      response.error = "tensor '" + d.name + "': process set " + std::to_string(d.process_set) +
                       " does not exist (removed?)";
      response.error_code = ErrorCode::kInvalidArgument;
    } else if (c.readiness == Readiness::kNameConflict) {
      response.error = conflicts.at(c.it->second.tensor);
    } else if (std::string refusal = refusalError(agreement->per_rank); !refusal.empty()) {
      response.error = refusal;
      response.error_code = ErrorCode::kInvalidArgument;
    } else if (c.readiness == Readiness::kBlockedByJoin) {
      response.error = "tensor '" + d.name + "': " + kindName(d.kind) +
                       " cannot run while some ranks have joined; only allreduce can";
      response.error_code = ErrorCode::kInvalidArgument;
    } else {
      response.error = findMismatch(agreement->per_rank);
      if (d.kind == kJoin) {
        response.result = {last_joined_};
        join_done = true;
      }
    }
    if (!d.group.empty()) {
      const RequestKey group{c.it->first.first, d.group};
      if (group_ready[group] < d.group_size) {
        ++group_failed_[group];  // failed alone; the rest of the group is still to come
      } else {
        group_failed_.erase(group);
      }
    }
    response.agreement = std::move(agreement);
    auto tensor = entries_per_tensor_.find(c.it->second.tensor);
    if (--tensor->second == 0) entries_per_tensor_.erase(tensor);
    entries_.erase(c.it);
    ready.push_back(std::move(response));
  }
  if (join_done) {
    std::fill(joined_.begin(), joined_.end(), false);
    last_joined_ = -1;
  }
  for (const Response& response : ready) announceDeferred(response.key);
  return ready;
}

void NegotiationTable::announceDeferred(const RequestKey& key) {
  auto it = deferred_.find(key);
  if (it == deferred_.end()) return;
  std::vector<Deferred> waiting = std::move(it->second);
  deferred_.erase(it);
  for (Deferred& d : waiting) announce(d.rank, std::move(d.descriptor), d.since);
}

std::string NegotiationTable::refusalError(const std::vector<std::optional<Descriptor>>& per_rank) {
  std::string refused, accepted, name;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (!per_rank[r]) continue;
    name = per_rank[r]->name;
    std::string& list = per_rank[r]->refused ? refused : accepted;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  if (refused.empty()) return "";
  return "request '" + name + "': submitted again on rank(s) " + refused +
         " while the earlier request of that name was still in flight there (one request per "
         "name may be in flight on a rank); the refused request took its turn of the name, so "
         "this turn fails on every rank" +
         (accepted.empty() ? std::string()
                           : " (on rank(s) " + accepted + " too, whose request of this turn was "
                                                          "accepted)");
}

std::string NegotiationTable::deadlockReport(const ProcessSets& sets) const {
  // Per rank, in rank order: each request it announced, and who never did.
  std::vector<std::string> per_rank(static_cast<size_t>(world_size_));
  for (const auto& [key, entry] : entries_) {
    auto members = sets.ranks(key.first);
    if (!members) continue;
    uint8_t kind = 0;
    for (const auto& d : entry.per_rank) {
      if (d) kind = d->kind;
    }
    std::string absent;
    for (int m : *members) {
      if (entry.per_rank[static_cast<size_t>(m)]) continue;
      if (kind == kAllreduce && joined_[static_cast<size_t>(m)]) continue;
      absent += (absent.empty() ? "rank " : ", rank ") + std::to_string(m);
    }
    std::string what;
    if (kind == kJoin) {
      what = "waits in join, which " + absent + " never joined";
    } else if (kind == static_cast<uint8_t>(RequestKind::kBarrier)) {
      what = "waits in barrier '" + key.second + "', which " + absent + " never entered";
    } else {
      what = std::string("waits for ") + kindName(kind) + " '" + key.second + "'" +
             (key.first ? " (process set " + std::to_string(key.first) + ")" : "") + ", which " +
             absent + " never submitted";
    }
    for (size_t r = 0; r < entry.per_rank.size(); ++r) {
      if (!entry.per_rank[r] || entry.per_rank[r]->refused) continue;  // nobody waits on a notice
      per_rank[r] += (per_rank[r].empty() ? "rank " + std::to_string(r) + " " : "; and ") + what;
    }
    auto behind = deferred_.find(key);
    if (behind == deferred_.end()) continue;
    for (const Deferred& d : behind->second) {
      if (d.descriptor.refused) continue;
      auto r = static_cast<size_t>(d.rank);
      per_rank[r] += (per_rank[r].empty() ? "rank " + std::to_string(r) + " " : "; and ") +
                     what + " (its refused duplicate of the name took a turn, which they " +
                     "must submit for this one's to come)";
    }
  }
  std::string report;
  for (const std::string& line : per_rank) {
    if (!line.empty()) report += (report.empty() ? "" : "; ") + line;
  }
  return report;
}

std::vector<Response> NegotiationTable::failAll(const ProcessSets& sets, const std::string& error,
                                                ErrorCode code) {
  std::vector<Response> out;
  // What waited behind a failed request (its rank's next turn of the name) waits in the same
  // deadlock: it fails too, round after round, until nothing is left.
  while (!entries_.empty()) {
    failEntries(sets, error, code, out);
    std::vector<RequestKey> behind;
    for (const auto& [key, d] : deferred_) behind.push_back(key);
    for (const RequestKey& key : behind) announceDeferred(key);
  }
  return out;
}

void NegotiationTable::failEntries(const ProcessSets& sets, const std::string& error,
                                   ErrorCode code, std::vector<Response>& out) {
  std::vector<std::map<RequestKey, Entry>::iterator> order;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) order.push_back(it);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a->second.seq < b->second.seq; });
  for (auto& it : order) {
    Response response;
    response.key = it->first;
    auto members = sets.ranks(it->first.first);
    if (members) response.members = *members;
    auto agreement = std::make_shared<Agreement>();
    agreement->per_rank = std::move(it->second.per_rank);
    response.agreement = std::move(agreement);
    response.error = error;
    response.error_code = code;
    out.push_back(std::move(response));
  }
  entries_.clear();
  entries_per_tensor_.clear();
  group_failed_.clear();
  // A join among them failed too: its ranks are active again, as after a completed join.
  std::fill(joined_.begin(), joined_.end(), false);
  last_joined_ = -1;
}

std::vector<NegotiationTable::Waiting> NegotiationTable::waiting(const ProcessSets& sets) const {
  std::vector<Waiting> out;
  for (const auto& [key, entry] : entries_) {
    auto members = sets.ranks(key.first);
    if (!members) continue;
    Waiting w{key, {}, {}, entry.since};
    uint8_t kind = 0;
    for (const auto& d : entry.per_rank) {
      if (d) kind = d->kind;
    }
    for (int m : *members) {
      if (entry.per_rank[static_cast<size_t>(m)]) {
        w.announced.push_back(m);
      } else if (!(kind == kAllreduce && joined_[static_cast<size_t>(m)])) {
        w.missing.push_back(m);
      }
    }
    if (!w.missing.empty()) out.push_back(std::move(w));
  }
  return out;
}

}  // namespace ronde::runtime
