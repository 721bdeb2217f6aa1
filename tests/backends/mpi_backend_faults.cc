// What MPI cannot recover from, under mpirun -np 2: a rank that stops calling collectives
// (its peer times out, within the collective timeout), and an abort on one rank (the other's
// wait ends with its reason, through the store, instead of hanging). Both leave an MPI request
// that can never finish, so this job ends without MPI_Finalize, as a failed MPI job does; ctest
// reads the verdict each rank prints, not mpirun's exit status.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ronde/communicator.h"

namespace {

using ronde::Communicator;
using ronde::DataType;
using ronde::Error;
using ronde::ErrorCode;
using ronde::ReduceOp;
using Clock = std::chrono::steady_clock;

bool expectFailure(Communicator& comm, ErrorCode code, const std::string& needle, double max_s) {
  std::vector<float> data(1000, 1.0f);
  auto start = Clock::now();
  try {
    comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
  } catch (const Error& e) {
    double took = std::chrono::duration<double>(Clock::now() - start).count();
    bool ok =
        e.code() == code && std::string(e.what()).find(needle) != std::string::npos && took < max_s;
    if (!ok) {
      std::printf("rank %d: got %s after %.1f s: %s\n", comm.rank(), ronde::errorCodeName(e.code()),
                  took, e.what());
    }
    return ok;
  }
  std::printf("rank %d: the allreduce succeeded\n", comm.rank());
  return false;
}

}  // namespace

int main() {
  bool ok = true;
  ::setenv("RONDE_TIMEOUT_SECONDS", "2", 1);
  {
    // Rank 1 comes 6 s late: rank 0 times out after 2 s, and rank 1 then fails at once with
    // rank 0's reason instead of waiting out its own timeout.
    auto comm = Communicator::fromEnvironment();
    if (comm->rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(6));
    ok &= expectFailure(*comm, ErrorCode::kTimeout, "did not finish within", 5.0);
  }
  ::setenv("RONDE_TIMEOUT_SECONDS", "60", 1);
  {
    // Rank 0 aborts while rank 1 waits in an allreduce: rank 1's wait ends with the reason.
    auto comm = Communicator::fromEnvironment();
    comm->barrier();
    if (comm->rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      comm->abort("the test aborts rank 0");
      ok &= expectFailure(*comm, ErrorCode::kAborted, "the test aborts rank 0", 1.0);
      // Rank 0 serves the store: keep it up while rank 1 reads the reason there.
      std::this_thread::sleep_for(std::chrono::seconds(2));
    } else {
      ok &= expectFailure(*comm, ErrorCode::kAborted, "the test aborts rank 0", 10.0);
    }
  }
  // A fresh communicator still meets the others, so every rank prints before any exits.
  auto last = Communicator::fromEnvironment();
  last->barrier();
  std::printf("rank %d of %d: MPI fault checks %s\n", last->rank(), last->size(),
              ok ? "passed" : "FAILED");
  std::fflush(stdout);
  last->barrier();
  return ok ? 0 : 1;
}
