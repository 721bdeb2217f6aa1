// The Runtime's process sets: those given at init, and the collective add and remove calls,
// which run through the negotiation so that every rank changes its registry (and its members
// build or drop the set's data communicator) at the same point of the same cycle.
#include <algorithm>

#include "runtime/runtime_impl.h"

namespace ronde::runtime {

void RuntimeImpl::registerInitialProcessSets(const std::vector<std::vector<int>>& process_sets) {
  // Every rank must hold the same registry: compare a digest of the lists (FNV-1a) across ranks.
  // A bad list fails after the exchange, so that no rank is left waiting in it.
  std::string invalid;
  uint64_t digest = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      digest ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      digest *= 1099511628211ull;
    }
  };
  for (const auto& ranks : process_sets) {
    if (invalid.empty()) invalid = ProcessSets::validate(ranks, size_);
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    mix(static_cast<int64_t>(sorted.size()));
    for (int r : sorted) mix(r);
  }
  if (size_ > 1) {
    std::vector<int64_t> digests(static_cast<size_t>(size_));
    auto mine = static_cast<int64_t>(digest);
    comms_->control().allgather(&mine, digests.data(), 1, DataType::kInt64);
    for (int r = 0; r < size_; ++r) {
      if (digests[static_cast<size_t>(r)] != digests[0]) {
        throw makeError(ErrorCode::kMismatch, "the process sets given at init differ between ",
                        comms_->world().describeRank(0), " and ", comms_->world().describeRank(r),
                        "; every rank must pass the same list");
      }
    }
  }
  if (!invalid.empty())
    throw makeError(ErrorCode::kConfig, "a process set given at init: ", invalid);
  // Each set's members meet for its data communicator, in list order on every rank.
  for (const auto& ranks : process_sets) {
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    comms_->addSet(sets_.add(sorted), sorted);
  }
}

int RuntimeImpl::addProcessSet(std::vector<int> ranks) {
  std::string why = ProcessSets::validate(ranks, size_);
  if (!why.empty()) throw makeError(ErrorCode::kInvalidArgument, "addProcessSet: ", why);
  std::sort(ranks.begin(), ranks.end());
  Descriptor d;
  d.kind = kAddProcessSetKind;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    d.name = "ronde.process_set." + std::to_string(process_set_calls_++);
  }
  d.splits.assign(ranks.begin(), ranks.end());
  return static_cast<int>(runInternal(std::move(d)).at(0));
}

void RuntimeImpl::removeProcessSet(int id) {
  if (id == 0)
    throw makeError(ErrorCode::kInvalidArgument, "process set 0 (all ranks) cannot be removed");
  if (!sets_.ranks(id))
    throw makeError(ErrorCode::kInvalidArgument, "process set ", id, " does not exist");
  Descriptor d;
  d.kind = kRemoveProcessSetKind;
  d.root = id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    d.name = "ronde.process_set." + std::to_string(process_set_calls_++);
  }
  runInternal(std::move(d));
}

std::vector<int> RuntimeImpl::processSetRanks(int id) const {
  std::shared_ptr<const std::vector<int>> ranks = sets_.ranks(id);
  if (!ranks) throw makeError(ErrorCode::kInvalidArgument, "process set ", id, " does not exist");
  return *ranks;
}

}  // namespace ronde::runtime
