// The two halves of a cycle's negotiation after the local requests are known: the response
// cache's bit vector (what every rank has ready among the cached tensors), and the
// announcements of uncached requests, from which rank 0's table decides what is ready
// everywhere. Both run on the control communicator.
#include <algorithm>
#include <chrono>
#include <sstream>

#include "common/logging.h"
#include "runtime/runtime_impl.h"

namespace ronde::runtime {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

bool RuntimeImpl::exchangeCacheBits(bool need_full, std::vector<Response>* ready) {
  size_t slots = static_cast<size_t>(cache_.highWater());
  // Byte 0: 0 when some rank needs the full exchange. Byte 1: 1 when no rank has anything
  // pending (min = and). Byte 2: 0 when some rank has nothing pending. Byte 3: 1 when every
  // rank has a thread blocked on the handle of a request still pending (the deadlock
  // detector's sign that no rank will submit anything more). Then one byte per cache slot.
  constexpr size_t kHeader = 4;
  cache_bits_.assign(kHeader + slots, 0);
  cache_bits_[0] = need_full ? 0 : 1;
  cache_bits_[1] = pending_.empty() ? 1 : 0;
  cache_bits_[2] = pending_.empty() ? 0 : 1;
  cache_bits_[3] =
      !pending_.empty() && blocked_threads_->load(std::memory_order_relaxed) > 0 ? 1 : 0;
  bool joined = table_.joined(rank_);
  for (size_t s = 0; s < slots; ++s) {
    const Response* r = cache_.at(static_cast<int>(s));
    if (r == nullptr) continue;
    if (indexIn(r->members, rank_) < 0 ||
        (joined && r->descriptor().kind == static_cast<uint8_t>(RequestKind::kAllreduce))) {
      cache_bits_[kHeader + s] = 1;
    }
  }
  for (const auto& [key, r] : pending_) {
    if (r.cache_slot >= 0) cache_bits_[kHeader + static_cast<size_t>(r.cache_slot)] = 1;
  }
  if (size_ > 1) {
    comms_->control().allreduce(cache_bits_.data(), cache_bits_.data(), cache_bits_.size(),
                                DataType::kUInt8, ReduceOp::kMin);
  }
  for (size_t s = 0; s < slots; ++s) {
    if (!cache_bits_[kHeader + s]) continue;
    const Response* r = cache_.at(static_cast<int>(s));
    if (r == nullptr) continue;
    bool someone_active =
        std::any_of(r->members.begin(), r->members.end(), [&](int m) { return !table_.joined(m); });
    if (!someone_active) continue;
    ready->push_back(*r);
    cache_.touch(static_cast<int>(s));
    auto it = pending_.find(r->key);
    if (it != pending_.end()) it->second.cache_slot = -1;
  }
  some_rank_free_ = cache_bits_[2] == 0;
  everyone_blocked_ = cache_bits_[3] == 1;
  everyone_idle_ = cache_bits_[0] == 1 && cache_bits_[1] == 1 && ready->empty() && table_.empty();
  return cache_bits_[0] == 0;
}

void RuntimeImpl::exchangeAnnouncements(uint8_t flags, std::vector<Response>* ready,
                                        int* stopped_by) {
  WireWriter writer;
  writer.u8(flags);
  if (rank_ == 0) writeKnobs(writer);
  // In submission order: each refusal notice between the requests drained before and after
  // it (a notice takes its rank's turn of a name; the table orders turns by arrival).
  std::vector<const Descriptor*> announce;
  auto notice = notices_.begin();
  for (size_t i = 0; i <= to_announce_.size(); ++i) {
    for (; notice != notices_.end() && notice->before <= i; ++notice)
      announce.push_back(&notice->descriptor);
    if (i == to_announce_.size()) break;
    auto it = pending_.find(to_announce_[i]);
    if (it != pending_.end()) announce.push_back(&it->second.descriptor);
  }
  writer.i32(static_cast<int32_t>(announce.size()));
  for (const Descriptor* d : announce) writer.descriptor(*d);
  to_announce_.clear();
  notices_.clear();

  std::vector<uint8_t>& mine = writer.bytes();
  std::vector<int64_t> lengths(static_cast<size_t>(size_));
  auto my_length = static_cast<int64_t>(mine.size());
  std::vector<size_t> counts;
  if (size_ > 1) {
    comms_->control().allgather(&my_length, lengths.data(), 1, DataType::kInt64);
  } else {
    lengths[0] = my_length;
  }
  size_t total = 0;
  for (int64_t n : lengths) {
    counts.push_back(static_cast<size_t>(n));
    total += static_cast<size_t>(n);
  }
  gathered_.resize(total);
  if (size_ > 1) {
    comms_->control().allgatherv(mine.data(), gathered_.data(), counts, DataType::kUInt8);
  } else {
    std::copy(mine.begin(), mine.end(), gathered_.begin());
  }

  auto now = Clock::now();
  size_t offset = 0;
  bool deadlock_found = false;
  announced_any_ = false;
  for (int r = 0; r < size_; ++r) {
    WireReader reader(gathered_.data() + offset, counts[static_cast<size_t>(r)]);
    offset += counts[static_cast<size_t>(r)];
    uint8_t rank_flags = reader.u8();
    if (r == 0 && (rank_flags & kDeadlockFlag)) deadlock_found = true;
    rank_flags &= static_cast<uint8_t>(~kDeadlockFlag);
    if (rank_flags != 0 && *stopped_by < 0) {
      *stopped_by = r;
      stall_stopped_ = (rank_flags & kStallStopFlag) != 0;
    }
    if (r == 0) readKnobs(reader);
    int32_t n = reader.i32();
    announced_any_ = announced_any_ || n > 0;
    for (int32_t i = 0; i < n; ++i) table_.announce(r, reader.descriptor(), now);
    RONDE_CHECK(reader.done(), "rank " << r << "'s negotiation message has trailing bytes");
  }

  std::vector<Response> taken = table_.takeReady(sets_);
  // Rank 0 found a deadlock. Every rank decides the same from the same gathered messages and
  // the same table: unless something was announced or became ready meanwhile (then it was
  // not one), every waiting request fails, with one message naming what each rank waits for.
  if (deadlock_found && !announced_any_ && taken.empty() && ready->empty()) {
    std::ostringstream why;
    why << "deadlock: every rank is blocked waiting on a request that some other rank never "
           "submitted, and nothing new came for RONDE_STALL_CHECK_TIME_SECONDS ("
        << settings_.stall_check_seconds << " s): " << table_.deadlockReport(sets_);
    const std::string message = why.str();
    if (rank_ == 0) log(LogLevel::kWarning, message);
    for (Response& response : table_.failAll(sets_, message, ErrorCode::kMismatch))
      ready->push_back(std::move(response));
    return;
  }
  for (Response& response : taken) {
    if (ResponseCache::cacheable(response)) {
      for (const RequestKey& key : cache_.put(response)) {
        auto it = pending_.find(key);
        if (it != pending_.end()) announceInFull(key, it->second);
      }
      response.cache_slot = cache_.find(response.key);
    }
    ready->push_back(std::move(response));
  }
}

}  // namespace ronde::runtime
