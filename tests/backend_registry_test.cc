// The backend registry and RONDE_CPU_OPERATIONS: what each value picks, and the clear errors
// for a backend that is unknown, not built, or cannot serve how the ranks were started.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "backends/backend_registry.h"
#include "ronde/communicator.h"

namespace ronde {
namespace {

Settings settingsWith(const std::map<std::string, std::string>& values) {
  return Settings::fromLookup([&](const std::string& name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
}

const Backend* findBackend(const std::string& name) {
  for (const Backend& backend : backends()) {
    if (backend.name == name) return &backend;
  }
  return nullptr;
}

TEST(BackendRegistry, CpuOperationsReadsRondeAndHorovodNames) {
  EXPECT_EQ(settingsWith({}).cpu_operations, CpuOperations::kAuto);
  EXPECT_EQ(settingsWith({{"RONDE_CPU_OPERATIONS", "mpi"}}).cpu_operations, CpuOperations::kMpi);
  EXPECT_EQ(settingsWith({{"HOROVOD_CPU_OPERATIONS", "MPI"}}).cpu_operations, CpuOperations::kMpi);
  EXPECT_EQ(settingsWith({{"HOROVOD_CPU_OPERATIONS", "gloo"}}).cpu_operations,
            CpuOperations::kNative);
  EXPECT_EQ(settingsWith({{"RONDE_CPU_OPERATIONS", "Native"}}).cpu_operations,
            CpuOperations::kNative);
  EXPECT_EQ(CommOptions::fromSettings(settingsWith({{"RONDE_CPU_OPERATIONS", "mpi"}})).backend,
            CpuOperations::kMpi);
}

TEST(BackendRegistry, AnUnknownBackendNamesTheVariableAndTheChoices) {
  try {
    settingsWith({{"HOROVOD_CPU_OPERATIONS", "ccl"}});
    FAIL() << "ccl was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
    EXPECT_NE(std::string(e.what()).find("HOROVOD_CPU_OPERATIONS='ccl'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("mpi"), std::string::npos) << e.what();
  }
}

TEST(BackendRegistry, ListsNativeAndMpiWithNativeChosenByDefault) {
  ASSERT_NE(findBackend("native"), nullptr);
  ASSERT_NE(findBackend("mpi"), nullptr);
  EXPECT_TRUE(findBackend("native")->built);
  EXPECT_STREQ(chooseBackend(CpuOperations::kAuto, "").name, "native");
  // Started by mpirun, MPI is still used only when asked for.
  EXPECT_STREQ(chooseBackend(CpuOperations::kAuto, "mpirun").name, "native");
  EXPECT_STREQ(chooseBackend(CpuOperations::kNative, "mpirun").name, "native");
}

TEST(BackendRegistry, MpiAskedForIsChosenUnderMpirunOrIsAClearError) {
  const bool built = findBackend("mpi")->built;
  if (built) {
    EXPECT_STREQ(chooseBackend(CpuOperations::kMpi, "mpirun").name, "mpi");
    EXPECT_STREQ(chooseBackend(CpuOperations::kMpi, "srun").name, "mpi");
  }
  for (const char* launcher : {"", "mpirun"}) {
    if (built && std::string(launcher) == "mpirun") continue;
    try {
      chooseBackend(CpuOperations::kMpi, launcher);
      FAIL() << "mpi was chosen for launcher '" << launcher << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kConfig);
      const std::string text = e.what();
      EXPECT_NE(text.find("RONDE_CPU_OPERATIONS=mpi"), std::string::npos) << text;
      EXPECT_NE(text.find(built ? "started by mpirun or srun" : "has none"), std::string::npos)
          << text;
    }
  }
}

TEST(BackendRegistry, NcclIsListedButNeverChosenForHostBuffers) {
  const Backend* nccl = findBackend("nccl");
  ASSERT_NE(nccl, nullptr);
  EXPECT_TRUE(nccl->device_buffers);
  EXPECT_FALSE(nccl->kind.has_value());
  EXPECT_EQ(nccl->built, ncclBuiltVersion() != 0);
  for (CpuOperations ops : {CpuOperations::kAuto, CpuOperations::kNative}) {
    EXPECT_STRNE(chooseBackend(ops, "").name, "nccl");
  }
  if (nccl->built) {
    EXPECT_EQ(&deviceBackend("nccl"), nccl);
    EXPECT_GE(ncclBuiltVersion(), 21400) << "nonblocking communicators need NCCL 2.14";
  } else {
    try {
      deviceBackend("nccl");
      FAIL() << "a build without NCCL handed out its backend";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kConfig);
      EXPECT_NE(std::string(e.what()).find("not in this build"), std::string::npos) << e.what();
    }
  }
  try {
    deviceBackend("native");
    FAIL() << "native is no device backend";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
  }
}

TEST(BackendRegistry, FromEnvironmentRefusesMpiWithoutAnMpiLauncher) {
  if (std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("PMI_RANK") ||
      std::getenv("SLURM_PROCID")) {
    GTEST_SKIP() << "started by an MPI launcher";
  }
  ::setenv("RONDE_CPU_OPERATIONS", "mpi", 1);
  try {
    Communicator::fromEnvironment();
    ADD_FAILURE() << "an MPI communicator was built outside mpirun";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig) << e.what();
  }
  ::unsetenv("RONDE_CPU_OPERATIONS");
}

}  // namespace
}  // namespace ronde
