// The requests announced by the ranks and not yet run: the same on every rank, because every
// rank merges the same gathered messages in rank order. A request is ready once every member
// of its process set has announced it (a joined rank counts as announced for allreduce).
// Used by the background thread only.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "runtime/process_sets.h"
#include "runtime/response.h"

namespace ronde::runtime {

class NegotiationTable {
 public:
  using Clock = std::chrono::steady_clock;

  explicit NegotiationTable(int world_size);

  void announce(int rank, Descriptor descriptor, Clock::time_point now);
  // Whether some rank announced this request, or its tensor under another name (another
  // kind: see tensorName): either way, this rank must announce it in full too.
  bool announced(const Descriptor& descriptor) const;
  bool empty() const { return entries_.empty(); }
  bool joined(int rank) const { return joined_[static_cast<size_t>(rank)]; }
  bool anyJoined() const;

  // Removes and returns the requests that are ready (or can never be), in announcement order.
  // A tensor announced under different names (kinds) by ranks that together are all members
  // can never be ready: each such request fails with a kind mismatch.
  std::vector<Response> takeReady(const ProcessSets& sets);

  // For the deadlock detector: what each rank waits for, and which ranks never submitted it
  // ("rank 0 waits in barrier 'barrier', which rank 1 never entered; rank 1 waits for ...").
  std::string deadlockReport(const ProcessSets& sets) const;
  // Removes every request, each failing with `error` on the ranks that submitted it, in
  // announcement order, and then those that waited behind them for their next turn of a
  // name; a pending join fails too and no rank counts as joined afterwards.
  std::vector<Response> failAll(const ProcessSets& sets, const std::string& error,
                                ErrorCode code);

  // For the stall inspector: requests some members announced and others did not.
  struct Waiting {
    RequestKey key;
    std::vector<int> announced;
    std::vector<int> missing;
    Clock::time_point since;
  };
  std::vector<Waiting> waiting(const ProcessSets& sets) const;

 private:
  struct Entry {
    RequestKey tensor;  // process set, tensorName()
    std::vector<std::optional<Descriptor>> per_rank;
    uint64_t seq = 0;
    Clock::time_point since;
  };
  enum class Readiness { kWaiting, kReady, kBlockedByJoin, kNoSet, kNameConflict };
  Readiness readiness(const Entry& entry, const std::vector<int>* members) const;
  // Tensor -> mismatch message, for tensors announced under several names whose requests
  // all wait while every member announced one of them.
  std::map<RequestKey, std::string> nameConflicts(const ProcessSets& sets) const;

  // Announcements of a name by a rank that already has one waiting (a refusal notice and its
  // real request, in either order), in arrival order; announced when the entry before them
  // is released.
  struct Deferred {
    int rank;
    Descriptor descriptor;
    Clock::time_point since;
  };
  void announceDeferred(const RequestKey& key);
  // One round of failAll: the entries now in the table.
  void failEntries(const ProcessSets& sets, const std::string& error, ErrorCode code,
                   std::vector<Response>& out);
  // Non-empty when some rank's announcement is a refusal notice: the error for all of them.
  static std::string refusalError(const std::vector<std::optional<Descriptor>>& per_rank);

  int world_size_;
  std::map<RequestKey, std::vector<Deferred>> deferred_;
  std::map<RequestKey, Entry> entries_;
  std::map<RequestKey, int> entries_per_tensor_;
  // (process set, group) -> members already released with an error (a kind that cannot run
  // beside a joined rank, a name conflict): they count toward the group's completeness, or
  // its other members would wait for them forever. Dropped once the group is released.
  std::map<RequestKey, int> group_failed_;
  uint64_t next_seq_ = 0;
  std::vector<bool> joined_;
  int last_joined_ = -1;
};

}  // namespace ronde::runtime
