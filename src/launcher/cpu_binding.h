// `ronde run --bind-to core|socket|none`: which CPUs each rank may run on, as mpirun binds.
//
// The launcher learns each host's CPUs (the cores and sockets of the CPUs it may use) and
// gives local rank i of n its own core (`core`) or the CPUs of its socket (`socket`). The
// default, `auto`, binds to cores only when the host's ranks fit its cores, as mpirun does;
// oversubscribed ranks float over every CPU. Local workers are bound between fork and exec,
// remote ones through `taskset` in the ssh command, so that every thread a worker ever
// starts (BLAS, data loaders) inherits the binding.
#pragma once

#include <string>
#include <vector>

namespace ronde::launcher {

enum class BindTo { kAuto, kCore, kSocket, kNone };

// "auto", "core", "socket", "none" (mpirun also says "hwthread": treated as "core").
// Throws Error(kInvalidArgument) naming the accepted values.
BindTo parseBindTo(const std::string& text);
const char* bindToName(BindTo bind);

struct CpuCore {
  int socket = 0;
  std::vector<int> cpus;  // hardware threads of this core that the launcher may use
};

// The usable CPUs of one host, grouped into cores, ordered by socket then core.
struct CpuTopology {
  std::vector<CpuCore> cores;
  int sockets() const;
};

// The shell command that prints a host's topology in the format parseCpuTopology reads:
// one "Cpus_allowed_list:" line, then "cpu N SOCKET CORE" per CPU.
const char* cpuTopologyCommand();
// Parses that output (from ssh, or made locally). CPUs outside the allowed list are left
// out; a CPU without topology files counts as a core of its own on socket 0. Lines that
// are not topology lines are ignored, so the text may carry other output before it.
CpuTopology parseCpuTopology(const std::string& text);
// This machine, for this process (its affinity mask and /sys/devices/system/cpu).
CpuTopology localCpuTopology();

// The CPUs of local rank `local_rank` of `local_size`, or empty for no binding.
// `warning` is set when the request cannot be met as asked (more ranks than cores).
std::vector<int> cpusForRank(BindTo bind, int local_rank, int local_size,
                             const CpuTopology& topology, std::string* warning);

// "0-3,8" for taskset and reports.
std::string formatCpuList(const std::vector<int>& cpus);

}  // namespace ronde::launcher
