// horovodrun's --mpi, --mpi-args and --binding-args on `ronde run` (mpi_launch.h).
#pragma once

namespace CLI {
class App;
}

namespace ronde::launcher {

struct RunOptions;

void addMpiOptions(CLI::App* run, RunOptions* options);

}  // namespace ronde::launcher
