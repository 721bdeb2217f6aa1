// The table below is the one list of ronde's settings: reading, validation and the printed
// documentation all come from it, and the defaults from the member initialisers in
// settings.h. A variable that is unset or empty counts as absent.
#include "ronde/settings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <variant>

#include "ronde/errors.h"

namespace ronde {
namespace {

using Member = std::variant<int Settings::*, int64_t Settings::*, double Settings::*,
                            bool Settings::*, std::string Settings::*, TransportKind Settings::*,
                            LogLevel Settings::*, CpuOperations Settings::*,
                            GpuOperations Settings::*, ShmAllreduce Settings::*,
                            TensorflowOps Settings::*>;

struct Field {
  const char* name;  // without the RONDE_ / HOROVOD_ prefix
  Member member;
  const char* expected;  // numbers: what a valid value is, as error messages say it
  const char* help;
  int64_t minimum = 0;  // numbers: the least valid value (a 0-byte chunk would crawl)
  bool nonzero = false;  // real numbers: 0 is not valid either
  // The Horovod variable that means this setting, where it is not HOROVOD_<name>.
  const char* horovod_name = nullptr;
};

constexpr const char* kRank = "a rank (an integer >= 0)";
constexpr const char* kCount = "an integer count >= 0";
constexpr const char* kPositive = "an integer >= 1";
constexpr const char* kPositiveReal = "a number > 0";
constexpr const char* kBytes = "an integer number of bytes";
constexpr const char* kChunkBytes = "an integer number of bytes >= 4096";
constexpr const char* kSeconds = "a number of seconds >= 0";
constexpr const char* kMilliseconds = "a number of milliseconds >= 0";

const Field kFields[] = {
    {"RANK", &Settings::rank, kRank, "This worker's rank in the job, 0 <= RANK < SIZE."},
    {"SIZE", &Settings::size, kCount, "Number of workers in the job."},
    {"LOCAL_RANK", &Settings::local_rank, kRank, "This worker's rank among those on its host."},
    {"LOCAL_SIZE", &Settings::local_size, kCount, "Number of workers on this host."},
    {"CROSS_RANK", &Settings::cross_rank, kRank,
     "Index of this host among the hosts (the rank among workers of the same local rank)."},
    {"CROSS_SIZE", &Settings::cross_size, kCount, "Number of hosts."},
    {"STORE_ADDRESS", &Settings::store_address, nullptr,
     "host:port of the TCP key-value store the ranks meet through."},
    {"STORE_DIRECTORY", &Settings::store_directory, nullptr,
     "Shared directory used as the key-value store instead of STORE_ADDRESS."},
    {"SECRET", &Settings::secret, nullptr,
     "Job secret; connections that cannot prove they know it are refused."},
    {"HOSTNAME", &Settings::hostname, nullptr,
     "Host identity used to group ranks; forcing different values simulates several hosts."},
    {"INTERFACE", &Settings::interface, nullptr,
     "Network interface name or address the data plane binds to (empty: the store's route)."},
    {"TRANSPORT", &Settings::transport, nullptr,
     "Data plane: auto (shared memory within a host, TCP across), shm, or tcp."},
    {"CPU_OPERATIONS", &Settings::cpu_operations, nullptr,
     "Backend of the host collectives: auto (native), native (ronde's shm + TCP; gloo is "
     "accepted as its Horovod name), or mpi (OpenMPI's collectives; needs a build with MPI and "
     "ranks started by mpirun or srun)."},
    {"GPU_OPERATIONS", &Settings::gpu_operations, nullptr,
     "How collectives on CUDA tensors run: nccl (on the device, by the NCCL backend; every "
     "rank needs a GPU of its own), host (staged through pinned host memory and run by the "
     "host backend; mpi and ronde are accepted for it), or auto (nccl for each process set "
     "whose ranks all have a GPU of their own, where this build has NCCL; else host)."},
    {"GPU_STAGING_CHUNK_BYTES", &Settings::gpu_staging_chunk_bytes, kChunkBytes,
     "Host staging of CUDA tensors: the chunk whose device-to-host copy, host collective and "
     "host-to-device copy overlap those of the neighbouring chunks.", 4096},
    {"GPU_HIERARCHICAL_ALLREDUCE", &Settings::gpu_hierarchical_allreduce, nullptr,
     "CUDA allreduces on NCCL across hosts of equal rank counts: reduce-scatter with NCCL inside "
     "each host, allreduce each rank's share across hosts through host memory on the host "
     "backend, allgather with NCCL inside each host. Off: one NCCL allreduce over every rank. "
     "Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE sets it too.",
     0, false, "HOROVOD_HIERARCHICAL_ALLREDUCE"},
    {"TIMEOUT_SECONDS", &Settings::timeout_seconds, kSeconds,
     "Longest wait inside a collective before it fails with a timeout."},
    {"START_TIMEOUT", &Settings::start_timeout_seconds, kSeconds,
     "Longest wait for all ranks to meet at start-up."},
    {"LOG_LEVEL", &Settings::log_level, nullptr,
     "Least severe message logged: trace, debug, info, warning, error or fatal."},
    {"LOG_HIDE_TIME", &Settings::log_hide_time, nullptr,
     "Log lines without the time they were written (by default each starts with the local "
     "time to the microsecond, as Horovod's do)."},
    {"SMALL_ALLREDUCE_BYTES", &Settings::small_allreduce_bytes, kBytes,
     "Allreduces of at most this many bytes use the latency-optimal algorithm."},
    {"SHM_CHUNK_BYTES", &Settings::shm_chunk_bytes, kChunkBytes,
     "Per-rank pipeline chunk in shared memory; also the slot size, so the largest chunk the "
     "autotuner may choose.", 4096},
    {"SHM_ALLREDUCE", &Settings::shm_allreduce, nullptr,
     "Shared memory, allreduces past the small band: direct (read peers' buffers with "
     "cross-memory attach: fewer bytes, each page pinned by the kernel), staged (copy through "
     "the segment every local rank maps), or auto (each host times both at start-up and the "
     "direct one is used only where it is clearly faster on every host)."},
    {"TENSORFLOW_OPS", &Settings::tensorflow_ops, nullptr,
     "How ronde.tensorflow runs its collectives: compiled (TensorFlow kernels built with this "
     "ronde against the running TensorFlow, by `pip install --no-build-isolation` in an "
     "environment that has it; an error at import where they are missing or were built for "
     "another TensorFlow), python (tf.numpy_function bodies calling ronde from Python: about "
     "30 us more per op in a graph, held under the GIL), or auto (compiled where available, "
     "else python)."},
    {"TCP_CHUNK_BYTES", &Settings::tcp_chunk_bytes, kChunkBytes, "Pipeline chunk on TCP links.",
     4096},
    {"HIERARCHICAL_ALLREDUCE", &Settings::hierarchical_allreduce, nullptr,
     "Across hosts, reduce in shared memory within each host and ring across hosts."},
    {"HIERARCHICAL_CHUNK_BYTES", &Settings::hierarchical_chunk_bytes, kChunkBytes,
     "Pipeline step of the hierarchical allreduce, allgather and reduce-scatter, in bytes of the whole buffer: "
     "one chunk crosses hosts while the next is reduced and the previous gathered inside the "
     "host.",
     4096},
    {"HIERARCHICAL_ALLGATHER", &Settings::hierarchical_allgather, nullptr,
     "Across hosts of equal rank counts, each rank gathers its counterparts' blocks around a "
     "ring across hosts and the ranks of a host share them in shared memory; off: one flat "
     "ring over every rank. Horovod's HOROVOD_HIERARCHICAL_ALLGATHER sets it too."},
    {"HIERARCHICAL_REDUCESCATTER", &Settings::hierarchical_reducescatter, nullptr,
     "Across hosts of equal rank counts, the ranks of each host reduce in shared memory so that "
     "each holds its host's sum of its counterparts' blocks, and a ring across hosts among "
     "counterparts reduces those; off: one flat ring over every rank."},
    {"FUSION_THRESHOLD", &Settings::fusion_threshold_bytes, kBytes,
     "Largest fusion buffer: small tensors are batched into one collective up to this size."},
    {"FUSION_MAX_TENSOR_BYTES", &Settings::fusion_max_tensor_bytes, kBytes,
     "Largest tensor copied into the fusion buffer: larger ones run alone, in place, since "
     "copying them in and out costs more than their own collective's start-up (0: fuse every "
     "tensor that fits the fusion threshold, as Horovod does). Rank 0's value holds for all; "
     "the autotuner may change it."},
    {"MALLOC_TUNING", &Settings::malloc_tuning, nullptr,
     "At init, set glibc malloc's mmap and trim thresholds (32 MiB, 1 GiB) so that a training "
     "step's freed tensors stay mapped for the next step instead of being faulted in again; "
     "skipped when MALLOC_*_ thresholds or glibc.malloc tunables are set (0: leave malloc "
     "alone)."},
    {"CYCLE_TIME", &Settings::cycle_time_ms, kMilliseconds,
     "Longest wait between negotiation cycles of the background thread; arriving work starts "
     "one at once on an idle runtime."},
    {"CACHE_CAPACITY", &Settings::cache_capacity, kCount,
     "Number of tensor descriptions remembered so repeated collectives skip negotiation."},
    {"TIMELINE", &Settings::timeline_path, nullptr,
     "Path of a Chrome-trace timeline file to write from init (empty: no timeline; DYNAMIC: "
     "none until start_timeline() is called, as in Horovod)."},
    {"TIMELINE_MARK_CYCLES", &Settings::timeline_mark_cycles, nullptr,
     "Mark each negotiation cycle in the timeline."},
    {"STALL_CHECK_TIME_SECONDS", &Settings::stall_check_seconds, kSeconds,
     "Warn when some ranks have waited this long for others to submit a tensor."},
    {"STALL_SHUTDOWN_TIME_SECONDS", &Settings::stall_shutdown_seconds, kSeconds,
     "Abort the job after a stall this long (0: never)."},
    {"STALL_CHECK_DISABLE", &Settings::stall_check_disable, nullptr,
     "Turn the stall inspector off."},
    {"DEADLOCK_CHECK_DISABLE", &Settings::deadlock_check_disable, nullptr,
     "Turn the deadlock detector off. When every rank has a thread blocked waiting on a "
     "request, no request can run and no rank has announced anything new for "
     "RONDE_STALL_CHECK_TIME_SECONDS, the detector fails every waiting request on every rank "
     "with one MismatchError naming what each rank waits for; the runtime keeps running. Off, "
     "such a job only warns (and stops after RONDE_STALL_SHUTDOWN_TIME_SECONDS if set)."},
    {"LIVENESS_TIMEOUT_SECONDS", &Settings::liveness_timeout_seconds, kSeconds,
     "Fail every pending collective when a peer's heartbeat is this old (stopped or wedged "
     "process; 0: no heartbeats)."},
    {"AUTOTUNE", &Settings::autotune, nullptr,
     "Tune the runtime's knobs while training (Bayesian optimisation; rank 0 decides, every "
     "rank applies at the same cycle): fusion threshold, largest fused tensor, cycle time, "
     "response cache, and the native communicator's small-allreduce cutoff (the algorithm of "
     "each size band), shared-memory chunk (up to RONDE_SHM_CHUNK_BYTES), TCP chunk and "
     "hierarchical allreduce where the transports in use make them matter."},
    {"AUTOTUNE_LOG", &Settings::autotune_log, nullptr,
     "CSV file recording each autotuning sample and the final choice (empty: none)."},
    {"AUTOTUNE_WARMUP_SAMPLES", &Settings::autotune_warmup_samples, kCount,
     "Autotune samples discarded at the start (warm-up)."},
    {"AUTOTUNE_STEPS_PER_SAMPLE", &Settings::autotune_steps_per_sample, kPositive,
     "Training steps scored per autotune sample.", 1},
    {"AUTOTUNE_BAYES_OPT_MAX_SAMPLES", &Settings::autotune_max_samples, kPositive,
     "Autotune samples taken before the best setting is kept for the rest of the job.", 1},
    {"AUTOTUNE_GAUSSIAN_PROCESS_NOISE", &Settings::autotune_noise, kPositiveReal,
     "Noise of the autotuner's Gaussian process, as a variance of the normalised scores "
     "(higher: trusts single samples less).", 0, true},
    {"ELASTIC", &Settings::elastic, nullptr,
     "Set by `ronde run` for elastic workers: rank and size come from the driver per "
     "generation."},
    {"ELASTIC_WORKER_ID", &Settings::elastic_worker_id, nullptr,
     "Set by `ronde run`: an elastic worker's identity, stable while its process lives."},
    {"ELASTIC_TIMEOUT_SECONDS", &Settings::elastic_timeout_seconds, kSeconds,
     "Longest wait of an elastic worker for the driver to form its next world."},
};

std::string trim(const std::string& value) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  auto begin = std::find_if_not(value.begin(), value.end(), space);
  auto end = std::find_if_not(value.rbegin(), value.rend(), space).base();
  return begin < end ? std::string(begin, end) : std::string();
}

std::string lower(std::string value) {
  for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return value;
}

// A value read from one variable; `variable` is the full name actually read.
struct Source {
  std::string variable;
  std::string value;
};

[[noreturn]] void malformed(const Source& source, const std::string& expected) {
  throw makeError(ErrorCode::kConfig, source.variable, "='", source.value, "' is not ", expected);
}

// A number of the right form whose value lies outside what the setting can hold: said as
// such, with the range, rather than as a malformed value.
[[noreturn]] void outOfRange(const Source& source, const std::string& expected,
                             const std::string& largest) {
  throw makeError(ErrorCode::kConfig, source.variable, "='", source.value,
                  "' is out of range: expected ", expected, ", at most ", largest);
}

template <class Int>
Int parseInteger(const Source& source, const char* expected, int64_t minimum) {
  const std::string text = trim(source.value);
  Int parsed{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  if (error == std::errc::result_out_of_range && end == text.data() + text.size() &&
      text[0] != '-') {
    outOfRange(source, expected, std::to_string(std::numeric_limits<Int>::max()));
  }
  if (error != std::errc() || end != text.data() + text.size() ||
      static_cast<int64_t>(parsed) < minimum) {
    malformed(source, expected);
  }
  return parsed;
}

double parseReal(const Source& source, const char* expected) {
  const std::string text = trim(source.value);
  double parsed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  const bool whole = end == text.data() + text.size();
  // from_chars says out of range for a value beyond a double ("1e400") as for one too small
  // ("1e-400", malformed as before); strtod tells them apart (infinity for the first).
  const bool too_large = error == std::errc::result_out_of_range &&
                         std::isinf(std::strtod(text.c_str(), nullptr)) && text[0] != '-';
  if (whole && ((error == std::errc() && parsed > kLargestRealSetting) || too_large)) {
    std::ostringstream largest;
    largest << kLargestRealSetting;
    outOfRange(source, expected, largest.str());
  }
  if (error != std::errc() || !whole || !std::isfinite(parsed) || parsed < 0) {
    malformed(source, expected);
  }
  return parsed;
}

bool parseBool(const Source& source) {
  const std::string text = lower(trim(source.value));
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  malformed(source, "a boolean (1/0, true/false, yes/no, on/off)");
}

TransportKind parseTransport(const Source& source) {
  const std::string text = lower(trim(source.value));
  for (TransportKind kind : {TransportKind::kAuto, TransportKind::kShm, TransportKind::kTcp}) {
    if (text == transportKindName(kind)) return kind;
  }
  malformed(source, "a transport (auto, shm or tcp)");
}

CpuOperations parseCpuOperations(const Source& source) {
  const std::string text = lower(trim(source.value));
  // Horovod's gloo backend is what ronde's native one replaces: its scripts keep working.
  if (text == "gloo") return CpuOperations::kNative;
  for (CpuOperations kind : {CpuOperations::kAuto, CpuOperations::kNative, CpuOperations::kMpi}) {
    if (text == cpuOperationsName(kind)) return kind;
  }
  malformed(source, "a backend (auto, native, gloo or mpi)");
}

ShmAllreduce parseShmAllreduce(const Source& source) {
  const std::string text = lower(trim(source.value));
  for (ShmAllreduce kind : {ShmAllreduce::kAuto, ShmAllreduce::kDirect, ShmAllreduce::kStaged}) {
    if (text == shmAllreduceName(kind)) return kind;
  }
  malformed(source, "a shared-memory allreduce (auto, direct or staged)");
}

TensorflowOps parseTensorflowOps(const Source& source) {
  const std::string text = lower(trim(source.value));
  for (TensorflowOps ops : {TensorflowOps::kAuto, TensorflowOps::kCompiled, TensorflowOps::kPython}) {
    if (text == tensorflowOpsName(ops)) return ops;
  }
  malformed(source, "a TensorFlow op kind (auto, compiled or python)");
}

GpuOperations parseGpuOperations(const Source& source) {
  const std::string text = lower(trim(source.value));
  // Horovod's MPI (CUDA-aware MPI) is ronde's host path: the host backend moves the bytes.
  if (text == "mpi" || text == "ronde") return GpuOperations::kHost;
  for (GpuOperations kind : {GpuOperations::kAuto, GpuOperations::kNccl, GpuOperations::kHost}) {
    if (text == gpuOperationsName(kind)) return kind;
  }
  malformed(source, "a GPU path (auto, nccl, host, mpi or ronde)");
}

const char* logLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kFatal: return "fatal";
  }
  return "unknown";
}

LogLevel parseLogLevel(const Source& source) {
  const std::string text = lower(trim(source.value));
  for (LogLevel level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning,
                         LogLevel::kError, LogLevel::kFatal}) {
    if (text == logLevelName(level)) return level;
  }
  malformed(source, "a log level (trace, debug, info, warning, error or fatal)");
}

void apply(const Field& field, const Source& source, Settings& settings) {
  std::visit(
      [&](auto member) {
        using Value = std::remove_reference_t<decltype(settings.*member)>;
        Value& target = settings.*member;
        if constexpr (std::is_same_v<Value, int> || std::is_same_v<Value, int64_t>) {
          target = parseInteger<Value>(source, field.expected, field.minimum);
        } else if constexpr (std::is_same_v<Value, double>) {
          target = parseReal(source, field.expected);
          if (field.nonzero && target == 0) malformed(source, field.expected);
        } else if constexpr (std::is_same_v<Value, bool>) {
          target = parseBool(source);
        } else if constexpr (std::is_same_v<Value, TransportKind>) {
          target = parseTransport(source);
        } else if constexpr (std::is_same_v<Value, LogLevel>) {
          target = parseLogLevel(source);
        } else if constexpr (std::is_same_v<Value, CpuOperations>) {
          target = parseCpuOperations(source);
        } else if constexpr (std::is_same_v<Value, GpuOperations>) {
          target = parseGpuOperations(source);
        } else if constexpr (std::is_same_v<Value, ShmAllreduce>) {
          target = parseShmAllreduce(source);
        } else if constexpr (std::is_same_v<Value, TensorflowOps>) {
          target = parseTensorflowOps(source);
        } else {
          target = source.value;
        }
      },
      field.member);
}

std::string format(const Field& field, const Settings& settings) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& value = settings.*member;
        using Value = std::remove_cvref_t<decltype(value)>;
        if constexpr (std::is_same_v<Value, bool>) {
          return value ? "true" : "false";
        } else if constexpr (std::is_same_v<Value, TransportKind>) {
          return transportKindName(value);
        } else if constexpr (std::is_same_v<Value, LogLevel>) {
          return logLevelName(value);
        } else if constexpr (std::is_same_v<Value, CpuOperations>) {
          return cpuOperationsName(value);
        } else if constexpr (std::is_same_v<Value, GpuOperations>) {
          return gpuOperationsName(value);
        } else if constexpr (std::is_same_v<Value, ShmAllreduce>) {
          return shmAllreduceName(value);
        } else if constexpr (std::is_same_v<Value, TensorflowOps>) {
          return tensorflowOpsName(value);
        } else if constexpr (std::is_same_v<Value, std::string>) {
          return value;
        } else {
          std::ostringstream out;
          out << value;
          return out.str();
        }
      },
      field.member);
}

}  // namespace

Settings Settings::fromLookup(const std::function<const char*(const std::string&)>& lookup) {
  Settings settings;
  for (const Field& field : kFields) {
    const std::string ronde = std::string("RONDE_") + field.name;
    const std::string horovod =
        field.horovod_name != nullptr ? field.horovod_name : std::string("HOROVOD_") + field.name;
    for (const std::string& name : {ronde, horovod}) {
      std::string variable = name;
      const char* value = lookup(variable);
      if (value == nullptr || *value == '\0') continue;
      apply(field, Source{std::move(variable), value}, settings);
      break;
    }
  }
  return settings;
}

Settings Settings::fromEnvironment() {
  return fromLookup([](const std::string& name) { return std::getenv(name.c_str()); });
}

std::vector<Settings::Doc> Settings::documentation() {
  const Settings defaults;
  std::vector<Doc> docs;
  for (const Field& field : kFields) {
    std::string help = field.help;
    if (field.expected != nullptr) help += std::string(" Value: ") + field.expected + ".";
    docs.push_back(Doc{field.name, std::move(help), format(field, defaults)});
  }
  return docs;
}

namespace {

const Field& fieldNamed(const std::string& name) {
  for (const Field& field : kFields) {
    if (name == field.name) return field;
  }
  RONDE_CHECK(false, "'" << name << "' is not a setting of the table in settings.cc");
  return kFields[0];
}

}  // namespace

std::string Settings::variableName(const std::string& name) {
  return std::string("RONDE_") + fieldNamed(name).name;
}

std::string Settings::defaultText(const std::string& name) {
  return format(fieldNamed(name), Settings());
}

const char* transportKindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kAuto: return "auto";
    case TransportKind::kShm: return "shm";
    case TransportKind::kTcp: return "tcp";
  }
  return "unknown";
}

const char* cpuOperationsName(CpuOperations operations) {
  switch (operations) {
    case CpuOperations::kAuto: return "auto";
    case CpuOperations::kNative: return "native";
    case CpuOperations::kMpi: return "mpi";
  }
  return "unknown";
}

const char* shmAllreduceName(ShmAllreduce algorithm) {
  switch (algorithm) {
    case ShmAllreduce::kAuto: return "auto";
    case ShmAllreduce::kDirect: return "direct";
    case ShmAllreduce::kStaged: return "staged";
  }
  return "unknown";
}

const char* tensorflowOpsName(TensorflowOps ops) {
  switch (ops) {
    case TensorflowOps::kAuto: return "auto";
    case TensorflowOps::kCompiled: return "compiled";
    case TensorflowOps::kPython: return "python";
  }
  return "unknown";
}

const char* gpuOperationsName(GpuOperations operations) {
  switch (operations) {
    case GpuOperations::kAuto: return "auto";
    case GpuOperations::kNccl: return "nccl";
    case GpuOperations::kHost: return "host";
  }
  return "unknown";
}

}  // namespace ronde
