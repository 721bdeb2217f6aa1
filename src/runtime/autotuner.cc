#include "runtime/autotuner.h"

#include <algorithm>
#include <cmath>

#include "ronde/errors.h"

namespace ronde::runtime {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// Sizes are rounded to whole pages: nothing in the runtime distinguishes finer.
constexpr int64_t kPage = 4096;
constexpr double kShmChunkLow = 16 * 1024;

int64_t roundToPages(double bytes) {
  return std::max<int64_t>(kPage, static_cast<int64_t>(std::llround(bytes / kPage)) * kPage);
}

double logPosition(double value, double low, double high) {
  value = std::clamp(value, low, high);
  return (std::log(value) - std::log(low)) / (std::log(high) - std::log(low));
}

double logValue(double position, double low, double high) {
  return std::exp(std::log(low) +
                  std::clamp(position, 0.0, 1.0) * (std::log(high) - std::log(low)));
}

const AutotuneOptions& validated(const AutotuneOptions& options) {
  if (options.steps_per_sample < 1 || options.max_samples < 1 || options.warmup_samples < 0 ||
      !(options.noise > 0)) {
    throw makeError(ErrorCode::kConfig, "autotune needs steps per sample >= 1 (got ",
                    options.steps_per_sample, "), samples >= 1 (got ", options.max_samples,
                    "), warm-up samples >= 0 (got ", options.warmup_samples,
                    ") and a Gaussian process noise > 0 (got ", options.noise, ")");
  }
  return options;
}

}  // namespace

Autotuner::Autotuner(const AutotuneOptions& options, const TuningKnobs& initial)
    : options_(validated(options)),
      dimensions_([&] {
        std::vector<Dimension> d = {
            {Dimension::kFusionThreshold, "fusion_threshold_bytes", 0.25 * kMiB, 128 * kMiB},
            {Dimension::kCycleTime, "cycle_time_ms", 0.2, 20.0},
        };
        if (options.tune_response_cache) d.push_back({Dimension::kResponseCache, "response_cache"});
        if (options.tune_small_allreduce) {
          d.push_back({Dimension::kSmallAllreduce, "small_allreduce_bytes", 4096, 1 * kMiB});
        }
        if (options.tune_hierarchical) {
          d.push_back({Dimension::kHierarchical, "hierarchical_allreduce"});
          d.push_back({Dimension::kHierarchicalAllgather, "hierarchical_allgather"});
        }
        if (options.tune_shm_direct_read)
          d.push_back({Dimension::kShmDirectRead, "shm_direct_read"});
        if (options.tune_tcp_chunk)
          d.push_back({Dimension::kTcpChunk, "tcp_chunk_bytes", 64 * 1024.0, 8 * kMiB});
        if (options.tune_hierarchical_chunk) {
          d.push_back(
              {Dimension::kHierarchicalChunk, "hierarchical_chunk_bytes", 256 * 1024.0, 32 * kMiB});
        }
        // Up to 32 MiB, where the copies dwarf any start-up: the top of the range stands for
        // "no limit" as well.
        if (options.tune_fusion_max_tensor) {
          d.push_back({Dimension::kFusionMaxTensor, "fusion_max_tensor_bytes", 64 * 1024.0,
                       32 * kMiB});
        }
        // Below 16 KiB a chunk costs more in synchronisation than it saves in cache.
        if (options.shm_chunk_max_bytes > kShmChunkLow) {
          d.push_back({Dimension::kShmChunk, "shm_chunk_bytes", kShmChunkLow,
                       static_cast<double>(options.shm_chunk_max_bytes)});
        }
        return d;
      }()),
      optimizer_(dimensions_.size(), options.noise, options.seed),
      knobs_(initial),
      warmups_left_(options.warmup_samples) {
  if (!options.log_path.empty()) {
    log_ = std::make_unique<std::ofstream>(options.log_path, std::ios::trunc);
    if (!*log_) {
      throw makeError(ErrorCode::kIo, "cannot write the autotune log '", options.log_path, "'");
    }
    *log_ << "sample,phase,fusion_threshold_bytes,cycle_time_ms,response_cache,"
             "hierarchical_allreduce,small_allreduce_bytes,tcp_chunk_bytes,shm_chunk_bytes,"
             "shm_direct_read,hierarchical_chunk_bytes,fusion_max_tensor_bytes,"
             "hierarchical_allgather,bytes,"
             "seconds,"
             "score_bytes_per_second\n"
          << std::flush;
  }
}

Autotuner::~Autotuner() = default;

std::vector<std::string> Autotuner::tunedKnobs() const {
  std::vector<std::string> names;
  for (const Dimension& d : dimensions_) names.emplace_back(d.name);
  return names;
}

std::vector<double> Autotuner::encode(const TuningKnobs& knobs) const {
  std::vector<double> point;
  for (const Dimension& d : dimensions_) {
    switch (d.knob) {
      case Dimension::kFusionThreshold:
        point.push_back(
            logPosition(static_cast<double>(knobs.fusion_threshold_bytes), d.low, d.high));
        break;
      case Dimension::kCycleTime:
        point.push_back(logPosition(knobs.cycle_time_ms, d.low, d.high));
        break;
      case Dimension::kResponseCache:
        point.push_back(knobs.response_cache ? 0.75 : 0.25);
        break;
      case Dimension::kHierarchical:
        point.push_back(knobs.hierarchical_allreduce ? 0.75 : 0.25);
        break;
      case Dimension::kShmDirectRead:
        point.push_back(knobs.shm_direct_read ? 0.75 : 0.25);
        break;
      case Dimension::kHierarchicalAllgather:
        point.push_back(knobs.hierarchical_allgather ? 0.75 : 0.25);
        break;
      case Dimension::kSmallAllreduce:
        point.push_back(
            logPosition(static_cast<double>(knobs.small_allreduce_bytes), d.low, d.high));
        break;
      case Dimension::kTcpChunk:
        point.push_back(logPosition(static_cast<double>(knobs.tcp_chunk_bytes), d.low, d.high));
        break;
      case Dimension::kShmChunk:
        point.push_back(logPosition(static_cast<double>(knobs.shm_chunk_bytes), d.low, d.high));
        break;
      case Dimension::kHierarchicalChunk:
        point.push_back(
            logPosition(static_cast<double>(knobs.hierarchical_chunk_bytes), d.low, d.high));
        break;
      case Dimension::kFusionMaxTensor:  // 0, no limit, is the top of the range
        point.push_back(knobs.fusion_max_tensor_bytes <= 0
                            ? 1.0
                            : logPosition(static_cast<double>(knobs.fusion_max_tensor_bytes),
                                          d.low, d.high));
        break;
    }
  }
  return point;
}

TuningKnobs Autotuner::decode(const std::vector<double>& point) const {
  TuningKnobs knobs = knobs_;
  for (size_t i = 0; i < dimensions_.size(); ++i) {
    const Dimension& d = dimensions_[i];
    const double u = point[i];
    switch (d.knob) {
      case Dimension::kFusionThreshold:
        knobs.fusion_threshold_bytes = roundToPages(logValue(u, d.low, d.high));
        break;
      case Dimension::kCycleTime:
        // Two decimals: finer steps only make the log harder to read.
        knobs.cycle_time_ms = std::round(logValue(u, d.low, d.high) * 100) / 100;
        break;
      case Dimension::kResponseCache:
        knobs.response_cache = u >= 0.5;
        break;
      case Dimension::kHierarchical:
        knobs.hierarchical_allreduce = u >= 0.5;
        break;
      case Dimension::kShmDirectRead:
        knobs.shm_direct_read = u >= 0.5;
        break;
      case Dimension::kHierarchicalAllgather:
        knobs.hierarchical_allgather = u >= 0.5;
        break;
      case Dimension::kSmallAllreduce:
        knobs.small_allreduce_bytes = roundToPages(logValue(u, d.low, d.high));
        break;
      case Dimension::kTcpChunk:
        knobs.tcp_chunk_bytes = roundToPages(logValue(u, d.low, d.high));
        break;
      case Dimension::kShmChunk:
        // Whole pages, never past the slot (which need not be a whole number of pages).
        knobs.shm_chunk_bytes =
            std::min(roundToPages(logValue(u, d.low, d.high)), static_cast<int64_t>(d.high));
        break;
      case Dimension::kHierarchicalChunk:
        knobs.hierarchical_chunk_bytes = roundToPages(logValue(u, d.low, d.high));
        break;
      case Dimension::kFusionMaxTensor:
        knobs.fusion_max_tensor_bytes = roundToPages(logValue(u, d.low, d.high));
        break;
    }
  }
  return knobs;
}

void Autotuner::log(const char* phase, const TuningKnobs& k, int64_t bytes, double seconds) {
  if (!log_) return;
  const double score = seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  *log_ << samples_ << ',' << phase << ',' << k.fusion_threshold_bytes << ',' << k.cycle_time_ms
        << ',' << (k.response_cache ? 1 : 0) << ',' << (k.hierarchical_allreduce ? 1 : 0) << ','
        << k.small_allreduce_bytes << ',' << k.tcp_chunk_bytes << ',' << k.shm_chunk_bytes << ','
        << (k.shm_direct_read ? 1 : 0) << ',' << k.hierarchical_chunk_bytes << ','
        << k.fusion_max_tensor_bytes << ',' << (k.hierarchical_allgather ? 1 : 0) << ',' << bytes << ',' << seconds << ',' << score << '\n'
        << std::flush;
}

std::optional<TuningKnobs> Autotuner::cycleDone(int64_t bytes, const std::vector<uint64_t>& tensors,
                                                Clock::time_point now) {
  if (finished_) return std::nullopt;
  std::optional<TuningKnobs> changed;
  const bool repeats = std::any_of(tensors.begin(), tensors.end(),
                                   [&](uint64_t id) { return step_tensors_.count(id) != 0; });
  if (repeats) {
    step_tensors_.clear();
    changed = stepEnded(now);
  }
  step_tensors_.insert(tensors.begin(), tensors.end());
  if (window_open_) window_bytes_ += bytes;
  return changed;
}

std::optional<TuningKnobs> Autotuner::stepEnded(Clock::time_point now) {
  if (!window_open_) {
    window_open_ = true;
    window_start_ = now;
    window_bytes_ = 0;
    window_steps_ = 0;
    return std::nullopt;
  }
  if (++window_steps_ < options_.steps_per_sample) return std::nullopt;

  const double seconds = std::chrono::duration<double>(now - window_start_).count();
  const int64_t bytes = window_bytes_;
  window_start_ = now;
  window_bytes_ = 0;
  window_steps_ = 0;
  if (warmups_left_ > 0) {
    --warmups_left_;
    log("warmup", knobs_, bytes, seconds);
    return std::nullopt;  // same knobs: the next window starts at once
  }
  ++samples_;
  log("sample", knobs_, bytes, seconds);
  optimizer_.addSample(encode(knobs_), seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0);

  TuningKnobs next =
      samples_ >= options_.max_samples ? decode(optimizer_.best()) : decode(optimizer_.suggest());
  if (samples_ >= options_.max_samples) {
    finished_ = true;
    log("final", next, 0, 0);
  }
  if (next == knobs_) return std::nullopt;
  knobs_ = next;
  // The step now starting runs partly under the old knobs: the next window opens after it.
  window_open_ = false;
  return knobs_;
}

}  // namespace ronde::runtime
