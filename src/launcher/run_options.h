// Everything `ronde run` was asked to do, as parsed from its command line (cli.cc).
#pragma once

#include <string>
#include <vector>

#include "launcher/elastic_options.h"
#include "launcher/worker_env.h"

namespace ronde::launcher {

struct RunOptions {
  int num_ranks = 0;
  bool num_ranks_given = false;
  std::string hosts;     // -H host1:2,host2:2
  std::string hostfile;  // --hostfile FILE
  bool hosts_given = false;     // -H, even -H '' (an error, not "no hosts")
  bool hostfile_given = false;  // --hostfile
  int ssh_port = 0;
  std::string ssh_identity_file;
  std::vector<std::string> ssh_options;  // --ssh-option, passed as `ssh -o`
  std::string network_interface;
  std::string output_directory;  // --output-filename
  bool prefix_timestamp = false;
  bool verbose = false;
  std::string bind_to = "auto";  // --bind-to: core, socket, none, auto (cpu_binding.h)
  bool report_bindings = false;  // --report-bindings: one line per rank
  double start_timeout_seconds = 30;      // for the launcher's own checks (ssh)
  double grace_seconds = 5;               // SIGTERM to SIGKILL when stopping workers
  std::string config_file;                // --config-file: horovodrun's YAML (config_file.h)
  std::vector<std::string> env_requests;  // -x NAME or -x NAME=value
  EnvList settings;                       // RONDE_* variables from the tuning flags
  ElasticOptions elastic;                 // elastic mode when discovery_script is set
  bool mpi = false;                       // --mpi: start the workers through mpirun
  std::string mpi_args;                   // --mpi-args: extra words for mpirun
  std::string binding_args;               // --binding-args: mpirun's binding, for the default
  bool mpi_args_given = false;
  bool binding_args_given = false;
  std::vector<std::string> command;
};

// Runs the job; returns the launcher's exit code. Bad input is reported before any worker
// starts, with exit code 2 (1 when hosts cannot be reached).
int runJob(const RunOptions& options);

}  // namespace ronde::launcher
