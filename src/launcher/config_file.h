// `ronde run --config-file FILE`: horovodrun's YAML config file, its schema exactly
// (horovod/runner/common/util/config_parser.py), each key read as the command-line flag that
// sets the same thing, so that a key means what its flag means and is refused where its flag
// is (num_nccl_streams, torus_allreduce, ...):
//
//   controller: gloo
//   params: {fusion_threshold_mb, cycle_time_ms, cache_capacity, hierarchical_allreduce,
//            hierarchical_allgather, torus_allreduce}
//   autotune: {enabled, log_file, warmup_samples, steps_per_sample, bayes_opt_max_samples,
//              gaussian_process_noise}
//   timeline: {filename, mark_cycles}
//   stall_check: {enabled, warning_time_seconds, shutdown_time_seconds}
//   library_options: {mpi_threads_disable, num_nccl_streams, thread_affinity,
//                     gloo_timeout_seconds}
//   logging: {level, with_timestamp}
//
// A key left empty (null) sets nothing, as in Horovod. An unknown key, a value of the wrong
// type, a key given twice or malformed YAML is an Error(kInvalidArgument) "FILE:LINE: ...".
#pragma once

#include <string>
#include <vector>

namespace ronde::launcher {

struct ConfigEntry {
  std::string key;                         // "params.cycle_time_ms"
  int line = 0;                            // where the value is
  std::vector<std::string> args;           // {"--cycle-time-ms", "2.5"}
  std::vector<std::string> overridden_by;  // flags that, given on the command line, win
};

// The entries of a config file's text; `origin` (the file name) starts every error.
std::vector<ConfigEntry> parseConfigText(const std::string& text, const std::string& origin);
// Reads and parses the file at `path`.
std::vector<ConfigEntry> readConfigFile(const std::string& path);

}  // namespace ronde::launcher
