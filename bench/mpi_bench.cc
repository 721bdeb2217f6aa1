// The MPI peers: MPI_Allreduce (float32 sum), MPI_Allgather and MPI_Bcast timed exactly as
// collectives_bench times ronde (harness.h). Built against OpenMPI by CMake (mpi_bench) and
// against MPICH by bench/setup_peers.sh (mpich_bench, --impl=mpich). Start it under the MPI's
// own launcher and choose the transport there; --transport and --impl only label the results:
//
//   mpirun -np 2 --mca pml ob1 --mca btl self,vader mpi_bench --transport=shm
//   mpirun -np 2 --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
//       mpi_bench --transport=tcp
//   MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp mpiexec -n 2 mpich_bench --impl=mpich --transport=tcp
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using namespace ronde::bench;

bool benchOne(Collective collective, size_t bytes, const std::string& impl,
              const std::string& transport, int trials, double trial_seconds) {
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int count = static_cast<int>(bytes / sizeof(float));
  RankOps ops;
  ops.barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  ops.max = [](double value) {
    double result = 0;
    MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return result;
  };

  size_t errors = 0;
  std::vector<float> in;
  std::vector<float> out;
  switch (collective) {
    case Collective::kAllreduce:
      in.resize(count);
      out.resize(count);
      fillAllreduceInput(in.data(), count, rank);
      MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      errors = countAllreduceErrors(out.data(), count, n);
      ops.run = [&] {
        MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      };
      break;
    case Collective::kAllgather: {
      const int per_rank = count / n;
      in.resize(per_rank);
      out.resize(static_cast<size_t>(per_rank) * n);
      fillAllgatherInput(in.data(), per_rank, rank);
      MPI_Allgather(in.data(), per_rank, MPI_FLOAT, out.data(), per_rank, MPI_FLOAT,
                    MPI_COMM_WORLD);
      errors = countAllgatherErrors(out.data(), per_rank, n);
      ops.run = [&, per_rank] {
        MPI_Allgather(in.data(), per_rank, MPI_FLOAT, out.data(), per_rank, MPI_FLOAT,
                      MPI_COMM_WORLD);
      };
      break;
    }
    case Collective::kBroadcast:
      out.resize(count);
      if (rank == 0) fillBroadcastRoot(out.data(), count);
      MPI_Bcast(out.data(), count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      errors = countBroadcastErrors(out.data(), count);
      ops.run = [&] { MPI_Bcast(out.data(), count, MPI_FLOAT, 0, MPI_COMM_WORLD); };
      break;
  }
  if (errors > 0) {
    std::fprintf(stderr, "VERIFY FAILED: %s %s rank %d, %s: %zu of %d elements wrong\n",
                 impl.c_str(), collectiveName(collective), rank, formatBytes(bytes).c_str(), errors,
                 count);
    return false;
  }
  const Timing timing = timeCollective(ops, bytes, trials, trial_seconds);
  if (rank == 0) printResult(impl, transport, collective, n, bytes, timing);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Args args(argc, argv);
  const std::string impl = args.get("impl", "mpi");  // "mpi" names OpenMPI in the tables
  const std::string transport = args.get("transport", "shm");
  const std::vector<size_t> sizes = args.getSizes();
  const std::vector<Collective> collectives = args.getCollectives("allreduce,allgather,broadcast");
  const int trials = args.getInt("trials", 3);
  const double trial_seconds = std::stod(args.get("trial-seconds", "0.15"));
  args.finish();

  for (Collective collective : collectives) {
    for (size_t bytes : sizes) {
      if (!benchOne(collective, bytes, impl, transport, trials, trial_seconds)) {
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
