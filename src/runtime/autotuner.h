// The autotuner (RONDE_AUTOTUNE=1): while the job trains, rank 0 tries settings of the
// runtime's knobs, scores each by the bytes the runtime reduced per second over a window of
// training steps, and lets Bayesian optimisation (a Gaussian process with expected
// improvement) pick the next setting; after the last sample it keeps the best one. The other
// ranks apply what rank 0 chose at the same cycle (the knobs ride in rank 0's negotiation
// message), so all ranks always run the same algorithms.
//
// A step is told apart without help from the framework: it ends when a tensor seen in the
// current step is submitted again (as in Horovod's parameter manager). A window is
// `steps_per_sample` steps; the step during which new knobs arrive is not counted. The first
// `warmup_samples` windows (allocation, page faults, caches warming) are discarded.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "runtime/bayesian_optimizer.h"

namespace ronde::runtime {

// What the tuner may change. Every rank applies a TuningKnobs value whole, between cycles:
// the runtime's own knobs, and the communicator's (Communicator::setTuning). The
// small-allreduce cutoff is where the latency-optimal allreduce gives way to the
// bandwidth-optimal one: tuning it chooses the algorithm of each size band.
struct TuningKnobs {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  bool response_cache = true;
  bool hierarchical_allreduce = true;
  int64_t small_allreduce_bytes = 0;  // the latency-optimal allreduce's size band
  int64_t tcp_chunk_bytes = 0;
  int64_t shm_chunk_bytes = 0;
  // Past the small band in shared memory: read and write peers' buffers, or stage through
  // the slots (CommTuning::shm_direct_read): the large band's algorithm.
  bool shm_direct_read = true;
  int64_t hierarchical_chunk_bytes = 0;  // the hierarchical collectives' pipeline step
  // Larger tensors skip the fusion buffer (Settings::fusion_max_tensor_bytes; 0: no limit).
  int64_t fusion_max_tensor_bytes = 0;
  bool hierarchical_allgather = true;  // CommTuning::hierarchical_allgather

  bool operator==(const TuningKnobs&) const = default;
};

struct AutotuneOptions {
  int warmup_samples = 3;
  int steps_per_sample = 10;
  int max_samples = 20;
  double noise = 0.8;
  std::string log_path;  // CSV of every sample; empty: none
  uint64_t seed = 20260601;
  bool tune_response_cache = true;
  // Knobs of the communicator's algorithms: tuned when the communicator can change them
  // between collectives.
  bool tune_small_allreduce = false;
  // Knobs that only matter across hosts; tuning them on one host would waste samples.
  bool tune_hierarchical = false;
  bool tune_tcp_chunk = false;
  bool tune_shm_direct_read = false;
  bool tune_hierarchical_chunk = false;
  // The shared-memory chunk, up to the slot the arena was built with (0: not tuned).
  int64_t shm_chunk_max_bytes = 0;
  // The largest fused tensor: worth tuning wherever there is more than one rank.
  bool tune_fusion_max_tensor = false;
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;

  // Throws Error(kIo) when the log cannot be written, Error(kConfig) for a bad option.
  Autotuner(const AutotuneOptions& options, const TuningKnobs& initial);
  ~Autotuner();

  // After each cycle of the background thread: the bytes the cycle reduced and an id for each
  // tensor it completed. Returns the knobs to use from the next cycle on, when they change.
  std::optional<TuningKnobs> cycleDone(int64_t bytes, const std::vector<uint64_t>& tensors,
                                       Clock::time_point now);

  bool finished() const { return finished_; }
  const TuningKnobs& knobs() const { return knobs_; }
  int samplesTaken() const { return samples_; }
  // The names of the knobs being tuned, in the optimiser's dimension order.
  std::vector<std::string> tunedKnobs() const;

 private:
  // One tuned knob: which one, and the range the unit interval maps onto (log-scaled for
  // sizes and times, whose effects are multiplicative; a flag is on above one half).
  struct Dimension {
    enum Knob {
      kFusionThreshold,
      kCycleTime,
      kResponseCache,
      kHierarchical,
      kShmDirectRead,
      kSmallAllreduce,
      kTcpChunk,
      kShmChunk,
      kHierarchicalChunk,
      kFusionMaxTensor,
      kHierarchicalAllgather
    };
    Knob knob;
    const char* name;
    double low = 0;
    double high = 0;
  };
  std::optional<TuningKnobs> stepEnded(Clock::time_point now);
  std::vector<double> encode(const TuningKnobs& knobs) const;
  TuningKnobs decode(const std::vector<double>& point) const;
  void log(const char* phase, const TuningKnobs& knobs, int64_t bytes, double seconds);

  AutotuneOptions options_;
  std::vector<Dimension> dimensions_;
  BayesianOptimizer optimizer_;
  TuningKnobs knobs_;
  std::unique_ptr<std::ofstream> log_;

  std::unordered_set<uint64_t> step_tensors_;
  bool window_open_ = false;
  Clock::time_point window_start_{};
  int64_t window_bytes_ = 0;
  int window_steps_ = 0;
  int warmups_left_ = 0;
  int samples_ = 0;
  bool finished_ = false;
};

}  // namespace ronde::runtime
