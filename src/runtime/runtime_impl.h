// The Runtime: requests from any thread go into `incoming_`; one background thread negotiates
// them with the other ranks every cycle over the control communicator and runs what is ready
// on the data communicators (communicator_set.h).
//
// Two small threads watch it from outside: the liveness monitor (heartbeats; a silent peer
// aborts the communicators, which wakes the background thread from any collective) and, on
// rank 0, the stall reporter (its warnings must appear while the background thread is stuck).
//
// Locking: mutex_ guards the hand-over between callers and the background thread (incoming_,
// in_flight_, the stop and fatal state). Everything under "background thread only" is touched
// by that thread alone (and by shutdown() once the thread has been joined).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ronde/runtime.h"
#include "runtime/autotuner.h"
#include "runtime/communicator_set.h"
#include "runtime/cycle_pacer.h"
#include "runtime/descriptor.h"
#include "runtime/device_set.h"
#include "runtime/executor.h"
#include "runtime/liveness_monitor.h"
#include "runtime/local_request.h"
#include "runtime/negotiation_table.h"
#include "runtime/process_sets.h"
#include "runtime/response_cache.h"
#include "runtime/stall_inspector.h"
#include "runtime/stall_reporter.h"
#include "runtime/timeline.h"

namespace ronde::runtime {

class RuntimeImpl final : public Runtime {
 public:
  // `process_sets` get ids 1, 2, ...; every rank must pass the same (checked here, collectively).
  // `devices` makes the device operations of CUDA tensors (empty: this build's; the CPU tests
  // give host-memory devices), `device_comms` the process sets' device communicators (empty:
  // NCCL's, where this build has it; the CPU tests give host communicators standing in).
  RuntimeImpl(const Settings& settings, std::unique_ptr<Communicator> comm,
              const std::vector<std::vector<int>>& process_sets = {},
              DeviceOpsFactory devices = {}, CommunicatorSet::DeviceFactory device_comms = {});
  ~RuntimeImpl() override;

  void shutdown() override;
  bool isInitialized() const override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return local_rank_; }
  int localSize() const override { return local_size_; }
  int crossRank() const override { return cross_rank_; }
  int crossSize() const override { return cross_size_; }

  std::shared_ptr<Handle> enqueue(Request request) override;
  std::vector<std::shared_ptr<Handle>> enqueueGroup(std::vector<Request> requests) override;
  int addProcessSet(std::vector<int> ranks) override;
  void removeProcessSet(int id) override;
  std::vector<int> processSetRanks(int id) const override;
  void startTimeline(const std::string& path, bool mark_cycles) override;
  void stopTimeline() override;
  void setFusionThreshold(int64_t bytes) override;
  void setCycleTime(double milliseconds) override;
  Communicator& communicator() override;
  RuntimeStats stats() const override;

 private:
  // Each rank's flags byte in the announcements (exchangeAnnouncements).
  static constexpr uint8_t kStopFlag = 1;       // the rank asked the runtime to shut down
  static constexpr uint8_t kStallStopFlag = 2;  // rank 0's stall inspector shuts the runtime down
  // Rank 0's deadlock detector: every waiting request fails (if nothing new came this cycle).
  static constexpr uint8_t kDeadlockFlag = 4;
  // The request checked and described on the caller's thread, with its handle (and the ready
  // event of a CUDA input); throws Error(kInvalidArgument) for a bad one.
  LocalRequest prepare(Request request, std::chrono::steady_clock::time_point now);
  std::vector<std::shared_ptr<Handle>> submitDescribed(std::vector<LocalRequest> requests);
  [[noreturn]] void throwInFlight(const Descriptor& d, const RequestKey& key) const;
  void wakeLocked(std::unique_lock<std::mutex>& lock);  // unlocks
  std::vector<int64_t> runInternal(Descriptor descriptor);
  void backgroundLoop();
  bool runCycle();  // false once the runtime stops
  void drainIncoming();
  // Sends a request waiting on the cached path (and every other member of its group) the full
  // way next cycle. A group is released whole, by the cache bits or by the table's count of
  // its members, never split between them: the table would wait for members the bits took.
  void announceInFull(const RequestKey& key, LocalRequest& r);
  // The cached fast path: true when some rank needs the full exchange this cycle.
  bool exchangeCacheBits(bool need_full, std::vector<Response>* ready);
  // The full exchange: every rank's announcements, gathered to every rank.
  void exchangeAnnouncements(uint8_t flags, std::vector<Response>* ready, int* stopped_by);
  void execute(std::vector<Response>& responses);  // counts the collectives it runs
  void finish(const RequestKey& key, std::shared_ptr<Tensor> output, std::vector<int64_t> result,
              std::exception_ptr error);
  void failEverything(std::exception_ptr error);
  // Liveness thread: `rank` has been silent for `seconds`; fails everything with kPeerLost,
  // running `before_telling` once the finding is recorded (LivenessMonitor::OnSilent).
  void onPeerSilent(int rank, double seconds, const std::function<void()>& before_telling);
  // Liveness thread: another rank published the job's first failure; aborts this rank too.
  void onJobFailed(const Error& first);
  void applyTimelineRequest();
  [[noreturn]] void throwUnusable() const;  // with mutex_ held
  void registerInitialProcessSets(const std::vector<std::vector<int>>& process_sets);
  // runtime_knobs.cc: the knobs all ranks change together, and the autotuner.
  void initKnobs();
  void writeKnobs(WireWriter& writer);  // rank 0
  void readKnobs(WireReader& reader);   // rank 0's message, on every rank
  void switchResponseCache(bool on);
  void publishKnobs();  // into stats_
  void autotuneCycle(const std::vector<Response>& ready);
  void applyCommTuning(const CommTuning& tuning);  // between collectives, on every rank

  Settings settings_;
  std::unique_ptr<CommunicatorSet> comms_;  // control, world data, per-set data
  // Threads of this rank waiting on an unfinished handle (every handle counts here).
  const std::shared_ptr<std::atomic<int>> blocked_threads_ = std::make_shared<std::atomic<int>>(0);
  int rank_, size_, local_rank_, local_size_, cross_rank_, cross_size_;
  ProcessSets sets_;
  DeviceSet devices_;  // thread-safe: enqueue records ready events on the callers' threads

  std::mutex shutdown_mutex_;  // one shutdown() at a time
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Guarded by mutex_. Refusal notices (Descriptor::refused, no handle) of requests refused as
  // already in flight are queued here too, in submission order with the requests: a notice
  // takes its rank's turn of a name between the requests before and after it.
  std::vector<LocalRequest> incoming_;
  // Guarded by mutex_; (process set, tensorName()). Hashed: every enqueue looks its name up.
  std::unordered_set<RequestKey, RequestKeyHash> in_flight_;
  bool stop_requested_ = false;         // guarded by mutex_
  bool sleeping_ = false;               // guarded by mutex_: the loop waits for work
  bool stopped_ = false;                // guarded by mutex_: the background thread ended
  bool shut_down_ = false;              // guarded by mutex_: shutdown() ran
  std::exception_ptr fatal_;            // guarded by mutex_
  std::exception_ptr peer_lost_;        // guarded by mutex_: what the liveness monitor found
  int process_set_calls_ = 0;           // guarded by mutex_

  // Knobs: this rank's wish; rank 0's travels with the negotiation and everyone adopts it.
  std::atomic<int64_t> wanted_fusion_threshold_;
  std::atomic<int64_t> wanted_fusion_max_tensor_;
  std::atomic<double> wanted_cycle_ms_;
  std::atomic<bool> wanted_response_cache_;
  std::atomic<bool> knobs_changed_{true};

  // Timeline changes from user threads, applied by the background thread at a cycle's start.
  std::mutex timeline_mutex_;
  bool timeline_change_ = false;             // guarded by timeline_mutex_
  std::unique_ptr<Timeline> timeline_next_;  // guarded by timeline_mutex_; null: stop

  // Background thread only.
  std::vector<LocalRequest> draining_;  // what drainIncoming took from incoming_; kept empty
  // Hashed, as every request is looked up here several times a cycle. Nothing depends on its
  // order: what is announced is ordered by the gathered messages, the same on every rank.
  std::unordered_map<RequestKey, LocalRequest, RequestKeyHash> pending_;
  std::vector<RequestKey> to_announce_;
  // Refusal notices, each announced before to_announce_[first] (the requests drained after it).
  struct Notice {
    size_t before;
    Descriptor descriptor;
  };
  std::vector<Notice> notices_;
  // Queues a refusal notice of `d` (mutex_ held).
  void queueNoticeLocked(const Descriptor& d);
  NegotiationTable table_;
  ResponseCache cache_;
  Executor executor_;
  StallInspector stall_inspector_;
  std::unique_ptr<Timeline> timeline_;
  int64_t fusion_threshold_;
  int64_t fusion_max_tensor_;
  double cycle_ms_;
  uint64_t cycle_ = 0;
  bool stall_stopped_ = false;
  bool everyone_idle_ = false;   // last cycle: no rank had anything pending
  bool some_rank_free_ = false;  // last cycle: some rank had nothing pending
  bool everyone_blocked_ = false;  // last cycle: every rank had a thread waiting on a handle
  bool announced_any_ = false;     // last full exchange: some rank announced something
  // Rank 0: since when every rank has been blocked with nothing ready and nothing announced.
  std::chrono::steady_clock::time_point stuck_since_;
  CycleOutcome last_cycle_;
  CyclePacer pacer_;
  std::chrono::steady_clock::time_point synchronized_at_;  // the last negotiation's end
  std::vector<uint8_t> cache_bits_;
  std::vector<uint8_t> gathered_;
  std::unique_ptr<Autotuner> autotuner_;  // rank 0 with RONDE_AUTOTUNE
  std::optional<CommTuning> wanted_comm_tuning_;  // rank 0: the autotuner's, until sent

  mutable std::mutex stats_mutex_;
  RuntimeStats stats_;  // guarded by stats_mutex_

  std::thread thread_;
  // Started before the background thread; stopped once it has been joined.
  std::unique_ptr<StallReporter> stall_reporter_;  // rank 0, unless the inspector is disabled
  std::unique_ptr<LivenessMonitor> liveness_;      // more than one rank, a store, a timeout
};

}  // namespace ronde::runtime
