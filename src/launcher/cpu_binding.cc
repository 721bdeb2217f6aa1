#include "launcher/cpu_binding.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; malformed parts are skipped.
std::set<int> parseCpuList(const std::string& text) {
  std::set<int> cpus;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, ',')) {
    int first = 0, last = 0;
    char dash = 0;
    std::istringstream range(part);
    if (!(range >> first)) continue;
    last = first;
    if (range >> dash && dash == '-' && !(range >> last)) continue;
    for (int cpu = first; cpu <= last && cpu - first < 65536; ++cpu) cpus.insert(cpu);
  }
  return cpus;
}

std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

BindTo parseBindTo(const std::string& text) {
  if (text == "auto") return BindTo::kAuto;
  if (text == "core" || text == "hwthread") return BindTo::kCore;
  if (text == "socket" || text == "package") return BindTo::kSocket;
  if (text == "none") return BindTo::kNone;
  throw makeError(ErrorCode::kInvalidArgument, "--bind-to ", text,
                  ": expected core, socket, none or auto");
}

const char* bindToName(BindTo bind) {
  switch (bind) {
    case BindTo::kAuto:
      return "auto";
    case BindTo::kCore:
      return "core";
    case BindTo::kSocket:
      return "socket";
    case BindTo::kNone:
      return "none";
  }
  return "?";
}

int CpuTopology::sockets() const {
  std::set<int> seen;
  for (const CpuCore& core : cores) seen.insert(core.socket);
  return static_cast<int>(seen.size());
}

const char* cpuTopologyCommand() {
  return "grep Cpus_allowed_list /proc/self/status; "
         "for d in /sys/devices/system/cpu/cpu[0-9]*; do "
         "echo \"cpu ${d##*cpu} $(cat $d/topology/physical_package_id 2>/dev/null || echo 0)"
         " $(cat $d/topology/core_id 2>/dev/null || echo -${d##*cpu})\"; done";
}

CpuTopology parseCpuTopology(const std::string& text) {
  std::set<int> allowed;
  bool have_allowed = false;
  std::map<std::pair<int, int>, std::vector<int>> by_core;  // (socket, core id) -> cpus
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      allowed = parseCpuList(line.substr(line.find(':') + 1));
      have_allowed = true;
      continue;
    }
    std::istringstream words(line);
    std::string tag;
    int cpu = 0, socket = 0, core = 0;
    if (!(words >> tag >> cpu >> socket >> core) || tag != "cpu" || cpu < 0) continue;
    by_core[{socket, core}].push_back(cpu);
  }
  CpuTopology topology;
  for (auto& [key, cpus] : by_core) {
    CpuCore core{key.first, {}};
    for (int cpu : cpus) {
      if (!have_allowed || allowed.count(cpu) != 0) core.cpus.push_back(cpu);
    }
    std::sort(core.cpus.begin(), core.cpus.end());
    if (!core.cpus.empty()) topology.cores.push_back(std::move(core));
  }
  return topology;
}

CpuTopology localCpuTopology() {
  std::ostringstream text;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    text << "Cpus_allowed_list:";
    std::vector<int> allowed;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &mask)) allowed.push_back(cpu);
    }
    text << formatCpuList(allowed) << "\n";
  }
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu);
    if (!std::ifstream(dir + "/topology/core_id") && !CPU_ISSET(cpu, &mask)) continue;
    std::string socket = readFirstLine(dir + "/topology/physical_package_id");
    std::string core = readFirstLine(dir + "/topology/core_id");
    text << "cpu " << cpu << ' ' << (socket.empty() ? "0" : socket) << ' '
         << (core.empty() ? std::to_string(-cpu) : core) << "\n";
  }
  return parseCpuTopology(text.str());
}

std::vector<int> cpusForRank(BindTo bind, int local_rank, int local_size,
                             const CpuTopology& topology, std::string* warning) {
  const int cores = static_cast<int>(topology.cores.size());
  if (bind == BindTo::kNone || cores == 0 || local_size <= 0) return {};
  if (bind == BindTo::kAuto) {
    if (local_size > cores) return {};  // oversubscribed: let the scheduler spread them
    bind = BindTo::kCore;
  }
  if (bind == BindTo::kCore) {
    if (local_size > cores && warning != nullptr) {
      *warning = std::to_string(local_size) + " ranks on " + std::to_string(cores) +
                 " cores: some ranks share a core";
    }
    return topology.cores[static_cast<size_t>(local_rank % cores)].cpus;
  }
  // Socket: ranks fill sockets in order, in equal blocks, as mpirun's --map-by socket does
  // for ranks placed by core.
  std::vector<int> sockets;
  for (const CpuCore& core : topology.cores) {
    if (std::find(sockets.begin(), sockets.end(), core.socket) == sockets.end())
      sockets.push_back(core.socket);
  }
  const int socket = sockets[static_cast<size_t>(
      static_cast<int64_t>(local_rank) * static_cast<int64_t>(sockets.size()) / local_size)];
  std::vector<int> cpus;
  for (const CpuCore& core : topology.cores) {
    if (core.socket == socket) cpus.insert(cpus.end(), core.cpus.begin(), core.cpus.end());
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::ostringstream out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (i > 0) out << ',';
    out << sorted[i];
    if (j > i) out << '-' << sorted[j];
    i = j + 1;
  }
  return out.str();
}

}  // namespace ronde::launcher
