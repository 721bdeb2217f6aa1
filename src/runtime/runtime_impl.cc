#include "runtime/runtime_impl.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "backends/backend_registry.h"
#include "common/logging.h"
#include "runtime/allocator_tuning.h"
#include "runtime/request_validation.h"

namespace ronde::runtime {
namespace {

using Clock = std::chrono::steady_clock;

std::exception_ptr abortedError(const std::string& why) {
  return std::make_exception_ptr(Error(ErrorCode::kAborted, why));
}

// Horovod's name for a request type in its timeline (Request::RequestType_Name): tools that read
// Horovod's timelines look for NEGOTIATE_ALLREDUCE, ALLREDUCE, ADASUM and the rest.
std::string timelineOpName(const Descriptor& d) {
  if (d.kind == static_cast<uint8_t>(RequestKind::kAllreduce) && d.op == ReduceOp::kAdasum)
    return "ADASUM";
  std::string name = kindName(d.kind);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

RuntimeImpl::RuntimeImpl(const Settings& settings, std::unique_ptr<Communicator> comm,
                         const std::vector<std::vector<int>>& process_sets,
                         DeviceOpsFactory devices, CommunicatorSet::DeviceFactory device_comms)
    : settings_(settings),
      comms_(std::make_unique<CommunicatorSet>(std::move(comm))),
      rank_(comms_->world().rank()),
      size_(comms_->world().size()),
      local_rank_(comms_->world().localRank()),
      local_size_(comms_->world().localSize()),
      cross_rank_(comms_->world().crossRank()),
      cross_size_(comms_->world().crossSize()),
      sets_(size_),
      devices_(std::move(devices)),
      wanted_fusion_threshold_(settings.fusion_threshold_bytes),
      wanted_fusion_max_tensor_(settings.fusion_max_tensor_bytes),
      wanted_cycle_ms_(settings.cycle_time_ms),
      wanted_response_cache_(settings.cache_capacity > 0),
      table_(size_),
      cache_(settings.cache_capacity),
      executor_(*comms_, sets_),
      stall_inspector_(settings.stall_check_seconds, settings.stall_shutdown_seconds,
                       settings.stall_check_disable),
      fusion_threshold_(settings.fusion_threshold_bytes),
      fusion_max_tensor_(settings.fusion_max_tensor_bytes),
      cycle_ms_(settings.cycle_time_ms) {
  if (settings.fusion_threshold_bytes < 0) {
    throw makeError(ErrorCode::kConfig, "RONDE_FUSION_THRESHOLD must be >= 0, not ",
                    settings.fusion_threshold_bytes);
  }
  if (settings.fusion_max_tensor_bytes < 0) {
    throw makeError(ErrorCode::kConfig, "RONDE_FUSION_MAX_TENSOR_BYTES must be >= 0, not ",
                    settings.fusion_max_tensor_bytes);
  }
  if (!(settings.cycle_time_ms > 0)) {
    throw makeError(ErrorCode::kConfig, "RONDE_CYCLE_TIME must be > 0 ms, not ",
                    settings.cycle_time_ms);
  }
  if (settings.cache_capacity < 0) {
    throw makeError(ErrorCode::kConfig, "RONDE_CACHE_CAPACITY must be >= 0, not ",
                    settings.cache_capacity);
  }
  // A device backend: NCCL where this build has it, or the stand-in a test gives.
  const bool device_backend = device_comms || deviceBackendBuilt("nccl");
  if (settings.gpu_operations == GpuOperations::kNccl && !device_backend) {
    throw makeError(ErrorCode::kConfig,
                    "RONDE_GPU_OPERATIONS=nccl, but this build of ronde has no NCCL (it is built "
                    "where CMake finds nvcc and NCCL, docs/gpu.md); unset it, or set host, to "
                    "stage CUDA tensors through host memory");
  }
  Executor::DeviceComms device_mode = Executor::DeviceComms::kOff;
  if (settings.gpu_operations == GpuOperations::kNccl) {
    device_mode = Executor::DeviceComms::kRequired;
  } else if (settings.gpu_operations == GpuOperations::kAuto && device_backend) {
    device_mode = Executor::DeviceComms::kWhereEachRankHasAGpu;
  }
  comms_->setDeviceFactory(std::move(device_comms));
  if (settings.malloc_tuning) {
    log(LogLevel::kDebug,
        "malloc: ", tuneAllocator([](const char* name) { return std::getenv(name); }));
  }
  Executor::DeviceSettings device_settings;
  device_settings.staging_chunk_bytes = static_cast<size_t>(settings.gpu_staging_chunk_bytes);
  device_settings.timeout = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double>(settings.timeout_seconds));
  device_settings.comms = device_mode;
  device_settings.hierarchical_allreduce = settings.gpu_hierarchical_allreduce;
  executor_.setDevices(&devices_, device_settings);
  registerInitialProcessSets(process_sets);
  initKnobs();
  // Horovod's HOROVOD_TIMELINE=DYNAMIC: a timeline that start_timeline() starts later.
  if (!settings.timeline_path.empty() && settings.timeline_path != kDynamicTimeline)
    startTimeline(settings.timeline_path, settings.timeline_mark_cycles);
  // Before the background thread, which reads these pointers.
  if (rank_ == 0 && !settings.stall_check_disable)
    stall_reporter_ =
        std::make_unique<StallReporter>(settings.stall_check_seconds, comms_->world());
  if (settings.liveness_timeout_seconds > 0 && size_ > 1 && comms_->world().store()) {
    liveness_ = std::make_unique<LivenessMonitor>(
        comms_->world().store(), rank_, size_, settings.liveness_timeout_seconds,
        [this](int rank, double seconds, const std::function<void()>& before_telling) {
          onPeerSilent(rank, seconds, before_telling);
        },
        [this](const Error& first) { onJobFailed(first); }, comms_->world().storeServerRank());
  }
  stuck_since_ = Clock::now();
  thread_ = std::thread([this] { backgroundLoop(); });
}

RuntimeImpl::~RuntimeImpl() { shutdown(); }

void RuntimeImpl::shutdown() {
  std::lock_guard<std::mutex> one_at_a_time(shutdown_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) return;
    stop_requested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Only now: while the background thread still ran (a negotiated stop waits for every peer),
  // the monitor had to be able to free it from a stopped one.
  liveness_.reset();
  stall_reporter_.reset();
  failEverything(abortedError("the runtime was shut down"));
  timeline_.reset();
  executor_.setTimeline(nullptr);
  {
    std::lock_guard<std::mutex> lock(timeline_mutex_);
    timeline_next_.reset();
  }
  comms_->reset();
  std::lock_guard<std::mutex> lock(mutex_);
  shut_down_ = true;
}

bool RuntimeImpl::isInitialized() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !shut_down_ && !stopped_;
}

void RuntimeImpl::startTimeline(const std::string& path, bool mark_cycles) {
  std::unique_ptr<Timeline> timeline;
  if (rank_ == 0) timeline = std::make_unique<Timeline>(path, mark_cycles);  // throws kIo here
  std::lock_guard<std::mutex> lock(timeline_mutex_);
  timeline_change_ = true;
  timeline_next_ = std::move(timeline);
}

void RuntimeImpl::stopTimeline() {
  std::lock_guard<std::mutex> lock(timeline_mutex_);
  timeline_change_ = true;
  timeline_next_.reset();
}

Communicator& RuntimeImpl::communicator() {
  if (!comms_->hasWorld()) throw Error(ErrorCode::kAborted, "the runtime was shut down");
  return comms_->world();
}

RuntimeStats RuntimeImpl::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

void RuntimeImpl::setFusionThreshold(int64_t bytes) {
  if (bytes < 0)
    throw makeError(ErrorCode::kInvalidArgument, "fusion threshold must be >= 0, not ", bytes);
  wanted_fusion_threshold_ = bytes;
  knobs_changed_ = true;
}

void RuntimeImpl::setCycleTime(double milliseconds) {
  if (!(milliseconds > 0))
    throw makeError(ErrorCode::kInvalidArgument, "cycle time must be > 0 ms");
  wanted_cycle_ms_ = milliseconds;
  knobs_changed_ = true;
}

void RuntimeImpl::applyTimelineRequest() {
  std::lock_guard<std::mutex> lock(timeline_mutex_);
  if (!timeline_change_) return;
  timeline_change_ = false;
  timeline_ = std::move(timeline_next_);
  executor_.setTimeline(timeline_.get());
}

void RuntimeImpl::backgroundLoop() {
  // This thread logs as its runtime's world rank, whatever communicators (process sets, other
  // in-process runtimes) were made since the process's prefix was set.
  ThreadLogPrefix prefix(rankLogPrefix(rank_));
  for (;;) {
    bool go = false;
    try {
      go = runCycle();
    } catch (const std::exception& e) {
      // A communicator aborts itself on its own failures; the others, and any failure outside
      // them, must still reach the other ranks, which would otherwise wait for this one.
      try {
        comms_->abortAll(ErrorCode::kAborted, std::string("rank ") + std::to_string(rank_) +
                                                  "'s runtime failed: " + e.what());
      } catch (...) {
      }
      // A silent peer's abort surfaces here as whatever the interrupted wait saw: the
      // monitor's finding says what happened.
      std::exception_ptr error = std::current_exception();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (peer_lost_) error = peer_lost_;
      }
      log(LogLevel::kError, "runtime stopped: ", e.what());
      failEverything(error);
    }
    if (!go) break;
    CyclePacer::Next pace = pacer_.afterCycle(last_cycle_, cycle_ms_);
    if (pace.at_once) continue;
    // Counted from the end of the cycle's negotiation, which every rank leaves at about the
    // same moment, so that clock-driven cycles of all ranks start together. Arriving work ends
    // the wait at once: peers that have not seen their own request yet join the negotiation
    // when they do, or when their clock runs out.
    auto next = synchronized_at_ + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double, std::milli>(pace.sleep_ms));
    std::unique_lock<std::mutex> lock(mutex_);
    sleeping_ = true;
    wake_.wait_until(lock, next, [&] { return stop_requested_ || !incoming_.empty(); });
    sleeping_ = false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stopped_ = true;
}

void RuntimeImpl::drainIncoming() {
  // The two vectors trade places and both keep their capacity, so that callers append
  // without reallocating once a step's number of requests has been seen.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_.swap(incoming_);
  }
  // A group (enqueued at once, so drained at once) waits on the cache only if every member
  // can; the caches of all ranks hold the same slots, so every rank decides the same. A
  // request after a refusal notice of its name goes the full way: on the cached path it could
  // pair with a peer's request of the turn the notice took, before the notice reached the
  // table.
  std::set<std::pair<int32_t, std::string>> full_groups;
  std::set<RequestKey> noticed;
  for (LocalRequest& r : draining_) {
    RequestKey key{r.descriptor.process_set, r.descriptor.name};
    if (r.descriptor.refused) {
      noticed.insert(std::move(key));
      continue;
    }
    const int slot = cache_.find(key);
    const bool cached = slot >= 0 && !noticed.count(key) && !table_.announced(r.descriptor) &&
                        cache_.matches(slot, rank_, r.descriptor);
    r.cache_slot = cached ? slot : -1;
    if (!cached && !r.descriptor.group.empty())
      full_groups.emplace(r.descriptor.process_set, r.descriptor.group);
  }
  for (LocalRequest& r : draining_) {
    RequestKey key{r.descriptor.process_set, r.descriptor.name};
    if (r.descriptor.refused) {
      // The notice takes the turn after this rank's pending request of the name (submitted
      // before it): that one must reach the table first, so it leaves the cached path now.
      auto it = pending_.find(key);
      if (it != pending_.end()) announceInFull(key, it->second);
      notices_.push_back({to_announce_.size(), std::move(r.descriptor)});
      continue;
    }
    if (!r.descriptor.group.empty() &&
        full_groups.count({r.descriptor.process_set, r.descriptor.group}))
      r.cache_slot = -1;
    if (r.cache_slot < 0) to_announce_.push_back(key);
    pending_.emplace(std::move(key), std::move(r));
  }
  draining_.clear();
}

void RuntimeImpl::announceInFull(const RequestKey& key, LocalRequest& r) {
  if (r.cache_slot < 0) return;
  r.cache_slot = -1;
  to_announce_.push_back(key);
  if (r.descriptor.group.empty()) return;
  for (auto& [other_key, other] : pending_) {
    if (other.cache_slot >= 0 && other_key.first == key.first &&
        other.descriptor.group == r.descriptor.group) {
      other.cache_slot = -1;
      to_announce_.push_back(other_key);
    }
  }
}

bool RuntimeImpl::runCycle() {
  ++cycle_;
  // One of them aborted from outside (a user's communicator().abort()) ends them all.
  comms_->throwIfAnyAborted();
  auto now = Clock::now();
  if (stall_reporter_) stall_reporter_->cycleStarted(now);
  applyTimelineRequest();
  if (timeline_ && timeline_->markCycles())
    timeline_->marker("CYCLE_START", now);
  drainIncoming();
  // Requests waiting on the cached path go the full way when another rank announced the same
  // name in full (a changed signature), when they waited long enough for the stall
  // inspector to need to see them, or when a joined rank will never set their bit (only
  // allreduce runs without joined ranks; negotiation fails the others at once).
  auto patience = stall_inspector_.cachedPatience();
  // The deadlock detector reads the table too, even with the stall inspector off.
  if (!settings_.deadlock_check_disable)
    patience = std::min(patience, StallInspector(settings_.stall_check_seconds, 0, false)
                                      .cachedPatience());
  const bool someone_joined = table_.anyJoined();
  for (auto& [key, r] : pending_) {
    const bool needs_joined_rank =
        someone_joined && r.descriptor.kind != static_cast<uint8_t>(RequestKind::kAllreduce);
    if (r.cache_slot >= 0 &&
        (table_.announced(r.descriptor) || needs_joined_rank || now - r.enqueued > patience)) {
      announceInFull(key, r);
    }
  }
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping = stop_requested_;
  }
  bool stall_stop = false;
  std::vector<NegotiationTable::Waiting> waiting;
  if (rank_ == 0) {
    waiting = table_.waiting(sets_);
    stall_stop = !waiting.empty() && stall_inspector_.shouldShutDown(waiting, now);
  }
  // Rank 0's deadlock detector: every rank has a thread blocked on a handle, requests wait in
  // the table, and for the stall check time nothing was announced and nothing could run. No
  // rank can submit the request another waits for, so waiting longer only hangs the job.
  const bool deadlock =
      rank_ == 0 && !settings_.deadlock_check_disable && !table_.empty() && everyone_blocked_ &&
      now - stuck_since_ >= std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(settings_.stall_check_seconds));
  bool need_full = !to_announce_.empty() || !notices_.empty() || stopping || stall_stop || deadlock ||
                   (rank_ == 0 && knobs_changed_.load());

  std::vector<Response> ready;
  int stopped_by = -1;
  uint8_t stop_flags = 0;
  auto negotiation_start = Clock::now();
  bool full = exchangeCacheBits(need_full, &ready);
  size_t cached = ready.size();
  if (full) {
    exchangeAnnouncements(
        stopping ? kStopFlag : (stall_stop ? kStallStopFlag : (deadlock ? kDeadlockFlag : 0)),
        &ready, &stopped_by);
    stop_flags = stopped_by >= 0 ? 1 : 0;
  }
  auto negotiation_end = Clock::now();
  synchronized_at_ = negotiation_end;
  if (!everyone_blocked_ || !ready.empty() || (full && announced_any_) || table_.empty())
    stuck_since_ = negotiation_end;
  // Before executing: a collective that blocks must find the reporter up to date.
  if (stall_reporter_) stall_reporter_->publish(full ? table_.waiting(sets_) : std::move(waiting));
  {
    // Before execute(), which completes the handles: a caller that waited for one reads
    // stats that count it.
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.cycles++;
    stats_.full_negotiations += full ? 1 : 0;
    stats_.responses += ready.size();
    stats_.cached_responses += cached;
    if (!ready.empty()) {
      stats_.negotiation_seconds +=
          std::chrono::duration<double>(negotiation_end - negotiation_start).count();
    }
  }
  execute(ready);
  autotuneCycle(ready);
  last_cycle_.progressed = !ready.empty();
  last_cycle_.everyone_idle = everyone_idle_;
  last_cycle_.some_rank_free = some_rank_free_;
  last_cycle_.waiting_on_peers = !pending_.empty();

  if (stop_flags) {
    failEverything(abortedError(
        stall_stopped_ ? "the runtime was shut down by rank 0's stall inspector: "
                         "requests waited past RONDE_STALL_SHUTDOWN_TIME_SECONDS"
                       : "the runtime was shut down by rank " + std::to_string(stopped_by)));
    return false;
  }
  return true;
}

void RuntimeImpl::execute(std::vector<Response>& responses) {
  // A response to this rank's refusal notice has no request here (a pending one of that
  // name, if any, is the rank's next turn, still to be negotiated or in this same batch after
  // a deadlock): it is an error everywhere, run by no collective, so this rank drops it.
  responses.erase(std::remove_if(responses.begin(), responses.end(),
                                 [this](const Response& r) {
                                   const auto& mine =
                                       r.agreement->per_rank[static_cast<size_t>(rank_)];
                                   return mine && mine->refused;
                                 }),
                  responses.end());
  if (responses.empty()) return;
  auto ready_at = Clock::now();
  if (timeline_) {
    for (const Response& r : responses) {
      auto it = pending_.find(r.key);
      if (it == pending_.end()) continue;
      const Descriptor& d = r.descriptor();
      std::string args = "\"dtype\":\"" + std::string(dataTypeName(d.dtype)) + "\",\"shape\":\"" +
                         formatShape(d.shape) + "\",\"bytes\":" +
                         std::to_string(d.numel() * static_cast<int64_t>(dataTypeSize(d.dtype))) +
                         ",\"cached\":" + (r.cache_slot >= 0 ? "true" : "false");
      it->second.decided = ready_at;
      timeline_->span(r.key.second, "NEGOTIATE_" + timelineOpName(d), it->second.enqueued,
                      ready_at, args);
    }
  }
  auto lookup = [this](const RequestKey& key) -> LocalRequest* {
    auto it = pending_.find(key);
    return it == pending_.end() ? nullptr : &it->second;
  };
  auto done = [this](const RequestKey& key, std::shared_ptr<Tensor> output,
                     std::vector<int64_t> result, std::exception_ptr error) {
    finish(key, std::move(output), std::move(result), std::move(error));
  };
  std::vector<ExecutionUnit> plan = planExecution(responses, fusion_threshold_, fusion_max_tensor_);
  for (const ExecutionUnit& unit : plan) {
    if (timeline_) {
      auto now = Clock::now();
      for (size_t i : unit.responses) {
        if (pending_.count(responses[i].key))
          timeline_->span(responses[i].key.second, "QUEUE", ready_at, now, "");
      }
    }
    // Counted before the unit runs, for the same reason as the responses; a rank outside the
    // unit's process set runs nothing.
    if (comms_->data(responses[unit.responses[0]].key.first) != nullptr) {
      std::lock_guard<std::mutex> lock(stats_mutex_);
      stats_.collectives++;
    }
    executor_.run(responses, unit, lookup, done);
    for (size_t i : unit.responses) {
      const Descriptor& d = responses[i].descriptor();
      if (d.kind != kRemoveProcessSetKind || !responses[i].error.empty()) continue;
      for (const RequestKey& key : cache_.dropProcessSet(d.root)) {
        auto it = pending_.find(key);
        if (it != pending_.end()) announceInFull(key, it->second);
      }
    }
  }
}

void RuntimeImpl::finish(const RequestKey& key, std::shared_ptr<Tensor> output,
                         std::vector<int64_t> result, std::exception_ptr error) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  std::shared_ptr<HandleImpl> handle = std::move(it->second.handle);
  RequestKey tensor = tensorKey(it->second.descriptor);
  if (timeline_ && it->second.decided != Clock::time_point{}) {
    timeline_->span(key.second, timelineOpName(it->second.descriptor), it->second.decided,
                    Clock::now(), "");
  }
  pending_.erase(it);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_.erase(tensor);
  }
  // Handles complete after the name is free, so a waiter may resubmit it at once.
  if (error) {
    handle->fail(error);
  } else {
    handle->succeed(std::move(output), std::move(result));
  }
}

}  // namespace ronde::runtime
