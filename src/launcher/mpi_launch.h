// `ronde run --mpi`: the workers start through mpirun, as horovodrun --mpi starts them.
//
// ronde still places the ranks (-np, -H, --hostfile) and serves the rendezvous store; mpirun
// only starts the processes. Each rank is one application context of mpirun (MPMD, `A : B`)
// on its host, in rank order, so MPI_COMM_WORLD's rank is RONDE_RANK and every worker starts
// with the same variables as without --mpi. Variables that are the same on every rank (the
// secret among them) travel in mpirun's environment, exported by name (`-x NAME`); the ones
// that differ between ranks are written out in their rank's context.
#pragma once

#include <string>
#include <vector>

#include "launcher/host_list.h"
#include "launcher/worker_env.h"

namespace ronde::launcher {

class SignalWatcher;

enum class MpiFlavour {
  kOpenMpi,  // OpenMPI's mpirun (orterun): -x NAME, -H host:slots
  kHydra,    // MPICH's or Intel MPI's mpirun (Hydra's mpiexec): -env NAME VALUE, -host
};

// Which mpirun is on PATH, from `mpirun --version` (as horovodrun tells). Throws
// Error(kInvalidArgument) when there is none or it is neither OpenMPI nor MPICH/Intel MPI.
MpiFlavour detectMpiFlavour();

// Splits --mpi-args / --binding-args into words as /bin/sh would (horovodrun pastes them into
// a shell command): blanks separate, quotes and backslashes group. Throws
// Error(kInvalidArgument) on an unclosed quote.
std::vector<std::string> splitShellWords(const std::string& text, const std::string& flag);

struct MpiRank {
  std::string host;  // as mpirun names it (no user@)
  int host_slots = 1;
  EnvList variables;  // the rank's whole RONDE_*/HOROVOD_* environment (workerVariables)
};

struct MpirunOptions {
  MpiFlavour flavour = MpiFlavour::kOpenMpi;
  bool as_root = false;  // OpenMPI refuses root without --allow-run-as-root
  std::vector<std::string> mpi_args;      // --mpi-args, split
  std::vector<std::string> binding_args;  // --binding-args, split; empty: Horovod's default
  std::string output_directory;           // --output-filename
  bool prefix_timestamp = false;
  bool report_bindings = false;
  std::string network_interface;  // --network-interface: OpenMPI's TCP uses it too
  bool remote_hosts = false;  // ranks on other hosts: mpirun's ssh gets ronde's ssh options
  int ssh_port = 0;
  std::string ssh_identity_file;
  std::vector<std::string> ssh_options;  // --ssh-option: `-o OPT` for the ssh mpirun runs
  std::vector<std::string> command;
};

// The variables every rank has with the same value: they go in mpirun's environment.
EnvList sharedVariables(const std::vector<MpiRank>& ranks);

// `shared` and then every variable of the launcher's environment that horovodrun would export
// too (not BASH_FUNC_*, OLDPWD, *CUDA_VISIBLE_DEVICES): names and values for mpirun's
// environment, each exported by name to every rank.
EnvList exportedVariables(char* const* environ, const EnvList& shared);

// mpirun's argv for the job; names in `shared` are exported from mpirun's environment.
std::vector<std::string> mpirunArgv(const MpirunOptions& options,
                                    const std::vector<MpiRank>& ranks, const EnvList& shared);

// Starts mpirun (its output goes straight to ours), passes SIGINT/SIGTERM/SIGHUP on to it and
// returns its exit code (128 + signal when a signal ended it or when it stopped on one of ours).
int runMpirun(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
              SignalWatcher& signals);

}  // namespace ronde::launcher
