// The knobs every rank must change together (fusion threshold and largest fused tensor, cycle
// time, response cache, and the communicator's algorithm knobs: size-band cutoff, chunks,
// hierarchical), and the autotuner that changes them. Rank 0's wish travels at the head of
// its negotiation message; every rank adopts it while reading that message, so all apply it
// between the same two cycles.
#include <functional>
#include <string>

#include "common/logging.h"
#include "runtime/runtime_impl.h"

namespace ronde::runtime {

void RuntimeImpl::publishKnobs() {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.fusion_threshold_bytes = fusion_threshold_;
  stats_.fusion_max_tensor_bytes = fusion_max_tensor_;
  stats_.cycle_time_ms = cycle_ms_;
  stats_.response_cache = cache_.capacity() > 0;
  stats_.communicator_tuning = comms_->world().tuning();
}

void RuntimeImpl::initKnobs() {
  publishKnobs();
  if (!settings_.autotune || rank_ != 0) return;
  AutotuneOptions options;
  options.warmup_samples = settings_.autotune_warmup_samples;
  options.steps_per_sample = settings_.autotune_steps_per_sample;
  options.max_samples = settings_.autotune_max_samples;
  options.noise = settings_.autotune_noise;
  options.log_path = settings_.autotune_log;
  // A cache of no slots was asked for: the tuner must not turn one on.
  options.tune_response_cache = settings_.cache_capacity > 0;
  // The communicator's knobs where it can change them; each only where it has an effect.
  const CommTuning tuning = comms_->world().tuning();
  if (comms_->world().tunable() && size_ > 1) {
    const std::string transport = comms_->world().transportName();
    const bool shm = transport.find("shm") != std::string::npos;
    const bool tcp = transport.find("tcp") != std::string::npos;
    options.tune_small_allreduce = true;
    options.tune_tcp_chunk = tcp;
    options.tune_hierarchical = shm && tcp;
    options.tune_hierarchical_chunk = shm && tcp;
    if (shm) options.shm_chunk_max_bytes = tuning.shm_chunk_bytes;
    options.tune_shm_direct_read = shm;
  }
  options.tune_fusion_max_tensor = size_ > 1;
  TuningKnobs initial;
  initial.fusion_threshold_bytes = settings_.fusion_threshold_bytes;
  initial.cycle_time_ms = settings_.cycle_time_ms;
  initial.response_cache = settings_.cache_capacity > 0;
  initial.hierarchical_allreduce = tuning.hierarchical_allreduce;
  initial.small_allreduce_bytes = tuning.small_allreduce_bytes;
  initial.tcp_chunk_bytes = tuning.tcp_chunk_bytes;
  initial.shm_chunk_bytes = tuning.shm_chunk_bytes;
  initial.shm_direct_read = tuning.shm_direct_read;
  initial.hierarchical_chunk_bytes = tuning.hierarchical_chunk_bytes;
  initial.fusion_max_tensor_bytes = settings_.fusion_max_tensor_bytes;
  initial.hierarchical_allgather = tuning.hierarchical_allgather;
  autotuner_ = std::make_unique<Autotuner>(options, initial);
}

void RuntimeImpl::writeKnobs(WireWriter& writer) {
  knobs_changed_ = false;
  writer.i64(wanted_fusion_threshold_.load());
  writer.i64(wanted_fusion_max_tensor_.load());
  writer.f64(wanted_cycle_ms_.load());
  writer.u8(wanted_response_cache_.load() ? 1 : 0);
  // The communicator's knobs only when they change: one byte in the usual message.
  writer.u8(wanted_comm_tuning_ ? 1 : 0);
  if (wanted_comm_tuning_) {
    writer.i64(wanted_comm_tuning_->small_allreduce_bytes);
    writer.i64(wanted_comm_tuning_->shm_chunk_bytes);
    writer.i64(wanted_comm_tuning_->tcp_chunk_bytes);
    writer.u8(wanted_comm_tuning_->hierarchical_allreduce ? 1 : 0);
    writer.u8(wanted_comm_tuning_->shm_direct_read ? 1 : 0);
    writer.i64(wanted_comm_tuning_->hierarchical_chunk_bytes);
    writer.u8(wanted_comm_tuning_->hierarchical_allgather ? 1 : 0);
    // Not tuned, but every field travels: the readers start from CommTuning's defaults.
    writer.u8(wanted_comm_tuning_->hierarchical_reducescatter ? 1 : 0);
    wanted_comm_tuning_.reset();
  }
}

void RuntimeImpl::readKnobs(WireReader& reader) {
  fusion_threshold_ = reader.i64();
  fusion_max_tensor_ = reader.i64();
  cycle_ms_ = reader.f64();
  const bool cache_on = reader.u8() != 0;
  if (cache_on != (cache_.capacity() > 0)) switchResponseCache(cache_on);
  if (reader.u8() != 0) {
    CommTuning tuning;
    tuning.small_allreduce_bytes = reader.i64();
    tuning.shm_chunk_bytes = reader.i64();
    tuning.tcp_chunk_bytes = reader.i64();
    tuning.hierarchical_allreduce = reader.u8() != 0;
    tuning.shm_direct_read = reader.u8() != 0;
    tuning.hierarchical_chunk_bytes = reader.i64();
    tuning.hierarchical_allgather = reader.u8() != 0;
    tuning.hierarchical_reducescatter = reader.u8() != 0;
    applyCommTuning(tuning);
  }
  publishKnobs();
}

void RuntimeImpl::applyCommTuning(const CommTuning& tuning) {
  // Every rank reads rank 0's message in the same cycle, after the negotiation's last
  // collective and before the cycle's first data collective: the same op index everywhere.
  comms_->setDataTuning(tuning);
}

void RuntimeImpl::switchResponseCache(bool on) {
  // Every rank drops (or starts) its cache here, in the same cycle, so the caches stay
  // identical. Requests that were waiting on a cache slot take the full path next cycle.
  cache_ = ResponseCache(on ? settings_.cache_capacity : 0);
  for (auto& [key, r] : pending_) {
    if (r.cache_slot < 0) continue;
    r.cache_slot = -1;
    to_announce_.push_back(key);
  }
}

void RuntimeImpl::autotuneCycle(const std::vector<Response>& ready) {
  if (!autotuner_ || autotuner_->finished()) return;
  int64_t bytes = 0;
  std::vector<uint64_t> tensors;
  for (const Response& r : ready) {
    const Descriptor& d = r.descriptor();
    if (!r.error.empty() || d.kind >= static_cast<uint8_t>(RequestKind::kBarrier)) continue;
    bytes += d.numel() * static_cast<int64_t>(dataTypeSize(d.dtype));
    tensors.push_back(std::hash<std::string>()(r.key.second) * 31 +
                      static_cast<uint64_t>(r.key.first));
  }
  const std::optional<TuningKnobs> next = autotuner_->cycleDone(bytes, tensors, Autotuner::Clock::now());
  if (!next) return;
  wanted_fusion_threshold_ = next->fusion_threshold_bytes;
  wanted_fusion_max_tensor_ = next->fusion_max_tensor_bytes;
  wanted_cycle_ms_ = next->cycle_time_ms;
  wanted_response_cache_ = next->response_cache;
  CommTuning tuning = comms_->world().tuning();
  tuning.small_allreduce_bytes = next->small_allreduce_bytes;
  tuning.shm_chunk_bytes = next->shm_chunk_bytes;
  tuning.tcp_chunk_bytes = next->tcp_chunk_bytes;
  tuning.hierarchical_allreduce = next->hierarchical_allreduce;
  tuning.shm_direct_read = next->shm_direct_read;
  tuning.hierarchical_chunk_bytes = next->hierarchical_chunk_bytes;
  tuning.hierarchical_allgather = next->hierarchical_allgather;
  if (comms_->world().tunable() && !(tuning == comms_->world().tuning())) wanted_comm_tuning_ = tuning;
  knobs_changed_ = true;
  if (autotuner_->finished()) {
    log(LogLevel::kInfo, "autotune chose fusion threshold ", next->fusion_threshold_bytes,
        " bytes, largest fused tensor ", next->fusion_max_tensor_bytes, " bytes, cycle time ",
        next->cycle_time_ms, " ms, response cache ",
        next->response_cache ? "on" : "off", "; communicator: small-allreduce cutoff ",
        next->small_allreduce_bytes, " bytes, shm chunk ", next->shm_chunk_bytes,
        " bytes, TCP chunk ", next->tcp_chunk_bytes, " bytes, hierarchical allreduce ",
        next->hierarchical_allreduce ? "on" : "off", ", hierarchical allgather ",
        next->hierarchical_allgather ? "on" : "off", ", shm direct reads ",
        next->shm_direct_read ? "on" : "off", ", hierarchical chunk ",
        next->hierarchical_chunk_bytes, " bytes after ", autotuner_->samplesTaken(),
        " samples");
  }
}

}  // namespace ronde::runtime
