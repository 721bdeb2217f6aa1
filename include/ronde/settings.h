// Every setting of ronde in one typed place. Each field is read from RONDE_<NAME>, or from
// HOROVOD_<NAME> when the RONDE_ name is unset, so Horovod users keep their scripts.
// A malformed value is an Error(kConfig) at init naming the variable and the value.
// The table in settings.cc is the documentation: `ronde check-build --settings` prints it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ronde {

enum class TransportKind { kAuto, kShm, kTcp };
// Which communication backend runs the host collectives (Horovod's HOROVOD_CPU_OPERATIONS).
// kAuto: the first of the preference list that serves the job (src/backends/backend_registry.cc).
enum class CpuOperations { kAuto, kNative, kMpi };
// How collectives on CUDA tensors run (Horovod's HOROVOD_GPU_OPERATIONS). kNccl: on the device
// by the NCCL backend (every rank needs its own GPU; Error(kConfig) at init in a build without
// NCCL); kHost: staged through pinned host memory and run by the host backend; kAuto: kNccl for
// each process set whose ranks all have a GPU of their own, where the build has NCCL, else kHost.
enum class GpuOperations { kAuto, kNccl, kHost };
enum class LogLevel { kTrace, kDebug, kInfo, kWarning, kError, kFatal };
// Shared memory, allreduces past the small band: kDirect reads peers' buffers with cross-memory
// attach, kStaged copies through the segment every local rank maps, kAuto times both at start.
enum class ShmAllreduce { kAuto, kDirect, kStaged };
// How ronde.tensorflow runs its collectives. kCompiled: the TensorFlow kernels built with this
// ronde against the running TensorFlow (an error where they are missing or were built for
// another TensorFlow); kPython: tf.numpy_function bodies calling ronde from Python; kAuto:
// compiled where available, else Python.
enum class TensorflowOps { kAuto, kCompiled, kPython };

// The largest value any real-valued setting (seconds, milliseconds, ...) or launcher flag of
// time takes: 1e9 s is about 31 years. Each becomes an integer somewhere (a std::chrono
// duration in nanoseconds overflows int64 past 9.2e9 s, and a deadline adds the clock's
// current time to it), so a larger value is refused where it is read, with this bound named,
// rather than wrapped around into a negative timeout.
inline constexpr double kLargestRealSetting = 1e9;

struct Settings {
  // Identity, handed to each worker by `ronde run`, mpirun or srun (-1: unknown).
  int rank = -1;
  int size = -1;
  int local_rank = -1;
  int local_size = -1;
  int cross_rank = -1;
  int cross_size = -1;

  // Rendezvous: "host:port" of a TCP store, or a shared directory for a file store.
  std::string store_address;
  std::string store_directory;
  std::string secret;     // job secret: connections that cannot prove it are refused
  std::string hostname;   // host identity; forced values simulate several hosts
  std::string interface;  // network interface or address the data plane binds to

  TransportKind transport = TransportKind::kAuto;
  CpuOperations cpu_operations = CpuOperations::kAuto;
  GpuOperations gpu_operations = GpuOperations::kAuto;
  int64_t gpu_staging_chunk_bytes = 4 * 1024 * 1024;  // host staging: copy/collective chunk
  // NCCL inside each host, host memory across hosts (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE
  // for GPUs); off: one NCCL allreduce over every rank, which is NCCL's own strength.
  bool gpu_hierarchical_allreduce = false;
  double timeout_seconds = 300;      // longest wait inside a collective
  double start_timeout_seconds = 60; // longest wait for all ranks to meet
  LogLevel log_level = LogLevel::kWarning;
  bool log_hide_time = false;  // log lines without their time (Horovod's HOROVOD_LOG_HIDE_TIME)

  // Algorithm choice.
  int64_t small_allreduce_bytes = 64 * 1024;  // at or below: latency-optimal algorithm
  int64_t shm_chunk_bytes = 1024 * 1024;       // per-rank pipeline chunk in shared memory
  int64_t tcp_chunk_bytes = 1024 * 1024;       // pipeline chunk on TCP links
  bool hierarchical_allreduce = true;         // across hosts: shm inside, ring across
  ShmAllreduce shm_allreduce = ShmAllreduce::kAuto;  // the large band's algorithm
  TensorflowOps tensorflow_ops = TensorflowOps::kAuto;  // read by ronde.tensorflow at import
  int64_t hierarchical_chunk_bytes = 4 * 1024 * 1024;  // its pipeline step, whole buffer
  bool hierarchical_allgather = true;         // across hosts: rings across, shm inside
  bool hierarchical_reducescatter = true;     // across hosts: shm inside, rings across

  // Runtime (negotiation, fusion, timeline, stall inspector).
  int64_t fusion_threshold_bytes = 128LL * 1024 * 1024;
  // Larger tensors run alone, in place: copying them through the fusion buffer and back
  // costs more than their own collective's start-up. 0: every tensor may be fused.
  int64_t fusion_max_tensor_bytes = 512 * 1024;
  bool malloc_tuning = true;  // keep freed memory mapped (runtime/allocator_tuning.h)
  double cycle_time_ms = 1.0;
  int cache_capacity = 1024;
  std::string timeline_path;
  bool timeline_mark_cycles = false;
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;  // 0: never shut down on a stall
  bool stall_check_disable = false;
  // Fail the requests of a deadlock (every rank blocked, nothing new for the stall check time).
  bool deadlock_check_disable = false;
  double liveness_timeout_seconds = 10;  // a peer silent this long is lost; 0: no heartbeats
  bool autotune = false;
  std::string autotune_log;
  int autotune_warmup_samples = 3;     // windows discarded before tuning starts
  int autotune_steps_per_sample = 10;  // training steps scored per sample
  int autotune_max_samples = 20;       // samples before the best setting is kept
  double autotune_noise = 0.8;         // Gaussian process noise (normalised scores)

  // Elastic jobs (`ronde run --host-discovery-script`): rank and size come from the driver
  // through the store for every generation (src/rendezvous/elastic_assignment.h).
  bool elastic = false;
  std::string elastic_worker_id;         // stable for the life of the worker process
  double elastic_timeout_seconds = 600;  // longest wait for the driver to form a new world

  // Reads the process environment.
  static Settings fromEnvironment();
  // Reads `lookup` (name -> value or nullptr) instead of the environment: tests use this.
  static Settings fromLookup(const std::function<const char*(const std::string&)>& lookup);

  struct Doc {
    std::string name;  // without prefix, e.g. "FUSION_THRESHOLD"
    std::string help;
    std::string default_value;
  };
  static std::vector<Doc> documentation();

  // "RONDE_<name>" for a setting of the table (name without prefix, e.g. "CYCLE_TIME"). A name
  // the table lacks is a bug, Error(kInternal), so code that sets a worker's variable (the
  // launcher's flags) cannot misspell one and set nothing.
  static std::string variableName(const std::string& name);
  // The table's default for one setting, as `ronde check-build --settings` prints it
  // ("warning", "60"). Error(kInternal) for a name the table lacks.
  static std::string defaultText(const std::string& name);
};

const char* transportKindName(TransportKind kind);
const char* cpuOperationsName(CpuOperations operations);
const char* gpuOperationsName(GpuOperations operations);
const char* shmAllreduceName(ShmAllreduce algorithm);
const char* tensorflowOpsName(TensorflowOps ops);

// RONDE_TIMELINE's value that writes no file at init: start_timeline() starts it later
// (Horovod's HOROVOD_TIMELINE=DYNAMIC).
inline constexpr const char* kDynamicTimeline = "DYNAMIC";

}  // namespace ronde
