#include "backends/mpi/mpi_process.h"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "ronde/errors.h"

namespace ronde::mpi {
namespace {

// Process-wide because MPI itself is: one MPI_Init and one MPI_Finalize per process.
struct ProcessState {
  std::mutex mutex;
  bool initialized_by_ronde = false;
  std::atomic<bool> unfinishable{false};
};

ProcessState& state() {
  static ProcessState* s = new ProcessState;  // never destroyed: atexit handlers read it
  return *s;
}

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !state().unfinishable.load()) MPI_Finalize();
}

}  // namespace

void ensureInitialized() {
  ProcessState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    throw makeError(
        ErrorCode::kConfig,
        "MPI was finalised in this process already: the MPI backend cannot start again");
  }
  int provided = 0;
  if (!initialized) {
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      throw makeError(ErrorCode::kConfig, "MPI_Init_thread failed");
    }
    s.initialized_by_ronde = true;
    std::atexit(finalizeAtExit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw makeError(ErrorCode::kConfig, "MPI provides thread level ", provided,
                    "; the MPI backend needs MPI_THREAD_SERIALIZED or more (initialise MPI with "
                    "MPI_Init_thread, or let ronde initialise it)");
  }
}

void markUnfinishable() { state().unfinishable.store(true); }

}  // namespace ronde::mpi
