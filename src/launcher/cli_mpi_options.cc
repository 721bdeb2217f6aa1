#include "launcher/cli_mpi_options.h"

#include <CLI/CLI.hpp>

#include "launcher/run_options.h"

namespace ronde::launcher {

void addMpiOptions(CLI::App* run, RunOptions* options) {
  CLI::Option* mpi = run->add_flag(
      "--mpi", options->mpi,
      "Start the workers through mpirun (OpenMPI, or MPICH's Hydra): ronde still places the "
      "ranks and serves their rendezvous; RONDE_CPU_OPERATIONS stays as set");
  mpi->group("MPI");
  // horovodrun's controllers exclude each other; --gloo is ronde's own backend.
  if (CLI::Option* gloo = run->get_option_no_throw("--gloo")) mpi->excludes(gloo);
  run->add_option_function<std::string>(
         "--mpi-args",
         [options](const std::string& args) {
           options->mpi_args = args;
           options->mpi_args_given = true;
         },
         "With --mpi: extra mpirun arguments, e.g. --mpi-args=\"-x FOO=bar\"")
      ->group("MPI");
  run->add_option_function<std::string>(
         "--binding-args",
         [options](const std::string& args) {
           options->binding_args = args;
           options->binding_args_given = true;
         },
         "With --mpi: mpirun's binding arguments instead of \"-bind-to none -map-by slot\"")
      ->group("MPI");
}

}  // namespace ronde::launcher
