#include "ronde/settings.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "ronde/communicator.h"
#include "ronde/errors.h"

namespace ronde {
namespace {

Settings read(const std::map<std::string, std::string>& env) {
  return Settings::fromLookup([&](const std::string& name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The message of the Error(kConfig) that reading `env` throws, or "" when none is thrown.
std::string configError(const std::map<std::string, std::string>& env) {
  try {
    read(env);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig) << e.what();
    return e.what();
  }
  return "";
}

TEST(SettingsTest, DefaultsWhenNothingIsSet) {
  const Settings s = read({});
  const Settings defaults;
  EXPECT_EQ(s.rank, -1);
  EXPECT_EQ(s.size, -1);
  EXPECT_EQ(s.transport, TransportKind::kAuto);
  EXPECT_EQ(s.log_level, LogLevel::kWarning);
  EXPECT_EQ(s.fusion_threshold_bytes, defaults.fusion_threshold_bytes);
  EXPECT_EQ(s.cycle_time_ms, defaults.cycle_time_ms);
  EXPECT_EQ(s.hierarchical_allreduce, defaults.hierarchical_allreduce);
  EXPECT_EQ(s.timeout_seconds, defaults.timeout_seconds);
  EXPECT_TRUE(s.store_address.empty());
}

TEST(SettingsTest, ReadsEveryKind) {
  const Settings s = read({{"RONDE_RANK", "3"},
                           {"RONDE_SIZE", "8"},
                           {"RONDE_LOCAL_RANK", "1"},
                           {"RONDE_LOCAL_SIZE", "2"},
                           {"RONDE_CROSS_RANK", "1"},
                           {"RONDE_CROSS_SIZE", "4"},
                           {"RONDE_STORE_ADDRESS", "10.0.0.1:2222"},
                           {"RONDE_SECRET", "s3cret"},
                           {"RONDE_TRANSPORT", "TCP"},
                           {"RONDE_TIMEOUT_SECONDS", "12.5"},
                           {"RONDE_START_TIMEOUT", "30"},
                           {"RONDE_LOG_LEVEL", "Debug"},
                           {"RONDE_FUSION_THRESHOLD", "1048576"},
                           {"RONDE_CYCLE_TIME", "0.5"},
                           {"RONDE_CACHE_CAPACITY", "0"},
                           {"RONDE_HIERARCHICAL_ALLREDUCE", "off"},
                           {"RONDE_TIMELINE_MARK_CYCLES", "yes"},
                           {"RONDE_STALL_CHECK_DISABLE", "TRUE"},
                           {"RONDE_DEADLOCK_CHECK_DISABLE", "1"},
                           {"RONDE_AUTOTUNE", "1"},
                           {"RONDE_TIMELINE", "/tmp/t.json"}});
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.size, 8);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_size, 2);
  EXPECT_EQ(s.cross_rank, 1);
  EXPECT_EQ(s.cross_size, 4);
  EXPECT_EQ(s.store_address, "10.0.0.1:2222");
  EXPECT_EQ(s.secret, "s3cret");
  EXPECT_EQ(s.transport, TransportKind::kTcp);
  EXPECT_DOUBLE_EQ(s.timeout_seconds, 12.5);
  EXPECT_DOUBLE_EQ(s.start_timeout_seconds, 30);
  EXPECT_EQ(s.log_level, LogLevel::kDebug);
  EXPECT_EQ(s.fusion_threshold_bytes, 1048576);
  EXPECT_DOUBLE_EQ(s.cycle_time_ms, 0.5);
  EXPECT_EQ(s.cache_capacity, 0);
  EXPECT_FALSE(s.hierarchical_allreduce);
  EXPECT_TRUE(s.timeline_mark_cycles);
  EXPECT_TRUE(s.stall_check_disable);
  EXPECT_TRUE(s.deadlock_check_disable);
  EXPECT_TRUE(s.autotune);
  EXPECT_EQ(s.timeline_path, "/tmp/t.json");
}

TEST(SettingsTest, RondeNameWinsOverHorovodName) {
  const Settings s = read({{"RONDE_FUSION_THRESHOLD", "100"},
                           {"HOROVOD_FUSION_THRESHOLD", "200"},
                           {"RONDE_RANK", "1"},
                           {"HOROVOD_RANK", "abc"}});  // never read, so never an error
  EXPECT_EQ(s.fusion_threshold_bytes, 100);
  EXPECT_EQ(s.rank, 1);
}

TEST(SettingsTest, HorovodNameAlone) {
  const Settings s = read({{"HOROVOD_FUSION_THRESHOLD", "200"},
                           {"HOROVOD_CYCLE_TIME", "5"},
                           {"HOROVOD_START_TIMEOUT", "90"},
                           {"HOROVOD_LOG_LEVEL", "error"},
                           {"HOROVOD_TIMELINE", "tl.json"},
                           {"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"}});
  EXPECT_EQ(s.fusion_threshold_bytes, 200);
  EXPECT_DOUBLE_EQ(s.cycle_time_ms, 5);
  EXPECT_DOUBLE_EQ(s.start_timeout_seconds, 90);
  EXPECT_EQ(s.log_level, LogLevel::kError);
  EXPECT_EQ(s.timeline_path, "tl.json");
  EXPECT_FALSE(s.hierarchical_allreduce);
}

// In Horovod one variable turns the hierarchical allreduce on for every path; ronde's host path
// has it on by default, and its NCCL path off, each with a RONDE_ variable of its own.
TEST(SettingsTest, HorovodHierarchicalAllreduceSetsTheGpuPathToo) {
  EXPECT_FALSE(read({}).gpu_hierarchical_allreduce);
  EXPECT_TRUE(read({}).hierarchical_allreduce);
  const Settings horovod = read({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}});
  EXPECT_TRUE(horovod.hierarchical_allreduce);
  EXPECT_TRUE(horovod.gpu_hierarchical_allreduce);
  const Settings ronde = read({{"RONDE_HIERARCHICAL_ALLREDUCE", "1"}});
  EXPECT_FALSE(ronde.gpu_hierarchical_allreduce);
  const Settings gpu = read({{"RONDE_GPU_HIERARCHICAL_ALLREDUCE", "0"},
                             {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}});
  EXPECT_FALSE(gpu.gpu_hierarchical_allreduce);  // ronde's own name first
  EXPECT_TRUE(gpu.hierarchical_allreduce);
  EXPECT_EQ(read({{"HOROVOD_GPU_HIERARCHICAL_ALLREDUCE", "1"}}).gpu_hierarchical_allreduce, false)
      << "not a Horovod variable";
}

TEST(SettingsTest, ShmAllreduceIsAutoDirectOrStaged) {
  EXPECT_EQ(read({}).shm_allreduce, ShmAllreduce::kAuto);
  EXPECT_EQ(read({{"RONDE_SHM_ALLREDUCE", "Direct"}}).shm_allreduce, ShmAllreduce::kDirect);
  EXPECT_EQ(read({{"HOROVOD_SHM_ALLREDUCE", "staged"}}).shm_allreduce, ShmAllreduce::kStaged);
  EXPECT_EQ(configError({{"RONDE_SHM_ALLREDUCE", "cma"}}),
            "RONDE_SHM_ALLREDUCE='cma' is not a shared-memory allreduce (auto, direct or staged)");
  EXPECT_FALSE(CommOptions::fromSettings(read({})).shm_direct_read.has_value());
  EXPECT_EQ(CommOptions::fromSettings(read({{"RONDE_SHM_ALLREDUCE", "direct"}})).shm_direct_read,
            std::optional<bool>(true));
  EXPECT_EQ(CommOptions::fromSettings(read({{"RONDE_SHM_ALLREDUCE", "staged"}})).shm_direct_read,
            std::optional<bool>(false));
}

TEST(SettingsTest, TensorflowOpsIsAutoCompiledOrPython) {
  EXPECT_EQ(read({}).tensorflow_ops, TensorflowOps::kAuto);
  EXPECT_EQ(read({{"RONDE_TENSORFLOW_OPS", "Compiled"}}).tensorflow_ops, TensorflowOps::kCompiled);
  EXPECT_EQ(read({{"RONDE_TENSORFLOW_OPS", "python"}}).tensorflow_ops, TensorflowOps::kPython);
  EXPECT_EQ(configError({{"RONDE_TENSORFLOW_OPS", "xla"}}),
            "RONDE_TENSORFLOW_OPS='xla' is not a TensorFlow op kind (auto, compiled or python)");
}

TEST(SettingsTest, EmptyValueCountsAsUnset) {
  const Settings s = read({{"RONDE_FUSION_THRESHOLD", ""}, {"HOROVOD_FUSION_THRESHOLD", "7"}});
  EXPECT_EQ(s.fusion_threshold_bytes, 7);
}

TEST(SettingsTest, MalformedValuesNameTheVariableRead) {
  EXPECT_EQ(configError({{"RONDE_FUSION_THRESHOLD", "abc"}}),
            "RONDE_FUSION_THRESHOLD='abc' is not an integer number of bytes");
  EXPECT_EQ(configError({{"HOROVOD_FUSION_THRESHOLD", "12MB"}}),
            "HOROVOD_FUSION_THRESHOLD='12MB' is not an integer number of bytes");
  const std::map<std::string, std::string> bad[] = {
      {{"RONDE_RANK", "x"}},
      {{"RONDE_SIZE", "-2"}},
      {{"HOROVOD_TIMEOUT_SECONDS", "-1"}},
      {{"RONDE_START_TIMEOUT", "soon"}},
      {{"RONDE_CYCLE_TIME", "nan"}},
      {{"RONDE_SHM_CHUNK_BYTES", "-4096"}},
      {{"RONDE_TCP_CHUNK_BYTES", "0"}},  // a 0-byte chunk was accepted and crawled 90x
      {{"HOROVOD_SHM_CHUNK_BYTES", "4095"}},
      {{"RONDE_HIERARCHICAL_ALLREDUCE", "maybe"}},
      {{"HOROVOD_AUTOTUNE", "2"}},
      {{"RONDE_TRANSPORT", "rdma"}},
      {{"HOROVOD_LOG_LEVEL", "loud"}},
      {{"RONDE_CACHE_CAPACITY", "1.5"}},
  };
  for (const auto& env : bad) {
    const std::string& variable = env.begin()->first;
    const std::string message = configError(env);
    EXPECT_EQ(message.rfind(variable + "='" + env.begin()->second + "' is not ", 0), 0u)
        << variable << ": '" << message << "'";
  }
}

// Every real setting becomes an integer somewhere (a timeout in milliseconds or in the
// clock's nanoseconds): a value that would overflow it is refused with the range, instead of
// wrapping around into a negative or zero timeout.
TEST(SettingsTest, OutOfRangeValuesSayTheRange) {
  EXPECT_EQ(configError({{"RONDE_START_TIMEOUT", "1e30"}}),
            "RONDE_START_TIMEOUT='1e30' is out of range: expected a number of seconds >= 0, at "
            "most 1e+09");
  EXPECT_EQ(configError({{"HOROVOD_CYCLE_TIME", "1e400"}}),
            "HOROVOD_CYCLE_TIME='1e400' is out of range: expected a number of milliseconds >= "
            "0, at most 1e+09");
  EXPECT_EQ(configError({{"RONDE_RANK", "99999999999"}}),
            "RONDE_RANK='99999999999' is out of range: expected a rank (an integer >= 0), at "
            "most 2147483647");
  EXPECT_EQ(configError({{"RONDE_FUSION_THRESHOLD", "99999999999999999999"}}),
            "RONDE_FUSION_THRESHOLD='99999999999999999999' is out of range: expected an integer "
            "number of bytes, at most 9223372036854775807");
  // Too small for a double is no overflow (and, as before, no valid value either).
  EXPECT_EQ(configError({{"RONDE_START_TIMEOUT", "1e-400"}}),
            "RONDE_START_TIMEOUT='1e-400' is not a number of seconds >= 0");
  // Below the range is not a number of the kind at all.
  EXPECT_EQ(configError({{"RONDE_RANK", "-99999999999"}}),
            "RONDE_RANK='-99999999999' is not a rank (an integer >= 0)");
  // The bound itself is valid, and read exactly.
  EXPECT_DOUBLE_EQ(read({{"RONDE_ELASTIC_TIMEOUT_SECONDS", "1e9"}}).elastic_timeout_seconds,
                   kLargestRealSetting);
  EXPECT_EQ(configError({{"RONDE_ELASTIC_TIMEOUT_SECONDS", "1000000001"}}),
            "RONDE_ELASTIC_TIMEOUT_SECONDS='1000000001' is out of range: expected a number of "
            "seconds >= 0, at most 1e+09");
}

TEST(SettingsTest, AutotuneKnobsUseHorovodsNamesAndDefaults) {
  const Settings defaults = read({});
  EXPECT_EQ(defaults.autotune_warmup_samples, 3);
  EXPECT_EQ(defaults.autotune_steps_per_sample, 10);
  EXPECT_EQ(defaults.autotune_max_samples, 20);
  EXPECT_DOUBLE_EQ(defaults.autotune_noise, 0.8);
  const Settings s = read({{"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "0"},
                           {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "4"},
                           {"RONDE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "30"},
                           {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.25"}});
  EXPECT_EQ(s.autotune_warmup_samples, 0);
  EXPECT_EQ(s.autotune_steps_per_sample, 4);
  EXPECT_EQ(s.autotune_max_samples, 30);
  EXPECT_DOUBLE_EQ(s.autotune_noise, 0.25);
  EXPECT_EQ(configError({{"RONDE_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}),
            "RONDE_AUTOTUNE_STEPS_PER_SAMPLE='0' is not an integer >= 1");
  EXPECT_EQ(configError({{"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0"}}),
            "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE='0' is not a number > 0");
}

TEST(SettingsTest, ChunkSizesHaveAFloor) {
  EXPECT_EQ(configError({{"RONDE_TCP_CHUNK_BYTES", "0"}}),
            "RONDE_TCP_CHUNK_BYTES='0' is not an integer number of bytes >= 4096");
  EXPECT_EQ(read({{"RONDE_TCP_CHUNK_BYTES", "4096"}}).tcp_chunk_bytes, 4096);
  EXPECT_EQ(read({{"RONDE_SHM_CHUNK_BYTES", "65536"}}).shm_chunk_bytes, 65536);
}

TEST(SettingsTest, MallocTuningIsOnUnlessTurnedOff) {
  EXPECT_TRUE(read({}).malloc_tuning);
  EXPECT_FALSE(read({{"RONDE_MALLOC_TUNING", "0"}}).malloc_tuning);
  EXPECT_FALSE(read({{"HOROVOD_MALLOC_TUNING", "off"}}).malloc_tuning);
  EXPECT_EQ(configError({{"RONDE_MALLOC_TUNING", "sometimes"}}),
            "RONDE_MALLOC_TUNING='sometimes' is not a boolean (1/0, true/false, yes/no, on/off)");
}

TEST(SettingsTest, DocumentationListsEveryFieldOnce) {
  const auto docs = Settings::documentation();
  std::set<std::string> names;
  for (const auto& doc : docs) {
    EXPECT_TRUE(names.insert(doc.name).second) << doc.name;
    EXPECT_FALSE(doc.help.empty()) << doc.name;
  }
  for (const char* name : {"RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE",
                           "STORE_ADDRESS", "STORE_DIRECTORY", "SECRET", "HOSTNAME", "INTERFACE",
                           "TRANSPORT", "TIMEOUT_SECONDS", "START_TIMEOUT", "LOG_LEVEL",
                           "SMALL_ALLREDUCE_BYTES", "SHM_CHUNK_BYTES", "TCP_CHUNK_BYTES",
                           "HIERARCHICAL_ALLREDUCE", "FUSION_THRESHOLD", "CYCLE_TIME",
                           "CACHE_CAPACITY", "TIMELINE", "TIMELINE_MARK_CYCLES",
                           "STALL_CHECK_TIME_SECONDS", "STALL_SHUTDOWN_TIME_SECONDS",
                           "STALL_CHECK_DISABLE", "DEADLOCK_CHECK_DISABLE", "AUTOTUNE",
                           "AUTOTUNE_LOG"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  for (const auto& doc : docs) {
    if (doc.name == "FUSION_THRESHOLD") {
      EXPECT_EQ(doc.default_value, "134217728");
    }
    if (doc.name == "TRANSPORT") {
      EXPECT_EQ(doc.default_value, "auto");
    }
    if (doc.name == "LOG_LEVEL") {
      EXPECT_EQ(doc.default_value, "warning");
    }
  }
}

TEST(SettingsTest, GpuOperationsTakeHorovodsNames) {
  EXPECT_EQ(read({}).gpu_operations, GpuOperations::kAuto);
  EXPECT_EQ(read({{"HOROVOD_GPU_OPERATIONS", "NCCL"}}).gpu_operations, GpuOperations::kNccl);
  EXPECT_EQ(read({{"HOROVOD_GPU_OPERATIONS", "MPI"}}).gpu_operations, GpuOperations::kHost);
  EXPECT_EQ(read({{"RONDE_GPU_OPERATIONS", "ronde"}}).gpu_operations, GpuOperations::kHost);
  EXPECT_EQ(read({{"RONDE_GPU_OPERATIONS", " host "}}).gpu_operations, GpuOperations::kHost);
  EXPECT_EQ(configError({{"RONDE_GPU_OPERATIONS", "ddl"}}),
            "RONDE_GPU_OPERATIONS='ddl' is not a GPU path (auto, nccl, host, mpi or ronde)");
  EXPECT_EQ(read({}).gpu_staging_chunk_bytes, 4 << 20);
  EXPECT_EQ(read({{"RONDE_GPU_STAGING_CHUNK_BYTES", "65536"}}).gpu_staging_chunk_bytes, 65536);
  EXPECT_NE(configError({{"RONDE_GPU_STAGING_CHUNK_BYTES", "100"}}), "");
}

TEST(SettingsTest, TransportNames) {
  EXPECT_STREQ(transportKindName(TransportKind::kAuto), "auto");
  EXPECT_STREQ(transportKindName(TransportKind::kShm), "shm");
  EXPECT_STREQ(transportKindName(TransportKind::kTcp), "tcp");
}

TEST(SettingsTest, FromEnvironment) {
  ::setenv("RONDE_SMALL_ALLREDUCE_BYTES", "4096", 1);
  EXPECT_EQ(Settings::fromEnvironment().small_allreduce_bytes, 4096);
  ::unsetenv("RONDE_SMALL_ALLREDUCE_BYTES");
}

}  // namespace
}  // namespace ronde
