// `ronde check-build`: what this build of ronde has, the way `horovodrun --check-build`
// shows it. Transports and backends are known from the build; the Python frameworks are looked
// up at run time in the interpreter given by --python (the pip-installed `ronde` passes its
// own), without importing them.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "backends/backend_registry.h"
#include "launcher/build_info.h"
#include "launcher/cli.h"
#include "launcher/process_group.h"
#include "ronde/settings.h"

extern char** environ;

namespace ronde::launcher {
namespace {

struct Component {
  bool present;
  std::string name;
  std::string detail;
};

// The output of a short command, or "" when it fails or takes over five seconds.
std::string outputOf(const std::vector<std::string>& argv) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  std::unique_ptr<ChildProcess> child;
  try {
    child = std::make_unique<ChildProcess>(ChildProcess::spawn({argv, environment, false, {}}));
  } catch (const std::exception&) {
    return "";
  }
  UniqueFd out = child->takeStdout();
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (out && std::chrono::steady_clock::now() < deadline) {
    pollfd fd{out.get(), POLLIN, 0};
    if (::poll(&fd, 1, 50) <= 0) continue;
    char buffer[1024];
    ssize_t got = ::read(out.get(), buffer, sizeof(buffer));
    if (got <= 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  for (int i = 0; i < 20 && !child->poll(); ++i) ::usleep(5000);
  if (!child->exited() || child->waitStatus() != 0) return "";
  return text;
}

std::string firstLineOf(const std::vector<std::string>& argv) {
  std::string text = outputOf(argv);
  return text.substr(0, text.find('\n'));
}

// The Python frameworks `python` has and whether ronde's frontend for each is importable,
// found without importing any framework (importlib only), so the command stays fast.
std::vector<Component> pythonFrontends(const std::string& python) {
  const char* probe =
      "import importlib.util, importlib.metadata, sys\n"
      "def has(module):\n"
      "    try:\n"
      "        return importlib.util.find_spec(module) is not None\n"
      "    except Exception:\n"
      "        return False\n"
      "def version(dist):\n"
      "    try:\n"
      "        return importlib.metadata.version(dist)\n"
      "    except Exception:\n"
      "        return '-'\n"
      "print('python', sys.version.split()[0], 'yes' if has('ronde._core') else 'no')\n"
      "for name, dist, frontend in (('PyTorch', 'torch', 'ronde.torch'),\n"
      "        ('TensorFlow', 'tensorflow', 'ronde.tensorflow'),\n"
      "        ('TensorFlow', 'tensorflow-cpu', 'ronde.tensorflow'),\n"
      "        ('Keras', 'keras', 'ronde.keras'), ('MXNet', 'mxnet', 'ronde.mxnet')):\n"
      "    print(name, version(dist), 'yes' if has(frontend) else 'no')\n";
  std::vector<Component> found;
  std::istringstream lines(outputOf({python, "-c", probe}));
  std::string name, version, frontend;
  std::set<std::string> seen;
  while (lines >> name >> version >> frontend) {
    if (name == "python") {
      found.push_back({frontend == "yes", "Python " + version,
                       python + (frontend == "yes" ? ", ronde._core" : ", no ronde._core")});
      continue;
    }
    if (version == "-" || !seen.insert(name).second) continue;
    std::string detail = (name == "PyTorch" ? "torch " : "") + version;
    detail += frontend == "yes" ? ", ronde frontend" : ", no ronde frontend yet";
    found.push_back({frontend == "yes", name, detail});
  }
  if (found.empty()) found.push_back({false, "Python", python + " did not answer"});
  return found;
}

void printSection(const char* title, const std::vector<Component>& components) {
  std::printf("  %s:\n", title);
  for (const Component& component : components) {
    std::printf("    [%c] %s", component.present ? 'X' : ' ', component.name.c_str());
    if (!component.detail.empty()) std::printf(" (%s)", component.detail.c_str());
    std::printf("\n");
  }
  std::printf("\n");
}

void printSettings() {
  std::printf("Settings (environment variables RONDE_<NAME>, or HOROVOD_<NAME>):\n\n");
  for (const Settings::Doc& doc : Settings::documentation()) {
    std::printf("  RONDE_%s", doc.name.c_str());
    if (!doc.default_value.empty()) std::printf("  (default: %s)", doc.default_value.c_str());
    std::printf("\n      %s\n", doc.help.c_str());
  }
}

}  // namespace

int checkBuild(bool print_settings, const std::string& python) {
  std::string mpi_runtime = firstLineOf({"mpirun", "--version"});
  std::printf("ronde %s (%s, %s)\n\n", RONDE_BUILD_VERSION, RONDE_BUILD_COMPILER, RONDE_BUILD_TYPE);
  printSection("Transports", {
                                 {RONDE_BUILD_HAS_SHM != 0, "shm", "shared memory, one host"},
                                 {RONDE_BUILD_HAS_TCP != 0, "tcp", "across hosts"},
                             });
  std::string mpi_detail = RONDE_BUILD_MPI_VERSION;
  if (!mpi_runtime.empty()) {
    mpi_detail += std::string(mpi_detail.empty() ? "" : "; ") + "mpirun: " + mpi_runtime;
  }
  // The registry's list, in its order of preference; MPI and NCCL printed as Horovod prints them.
  const int nccl = ncclBuiltVersion();
  std::vector<Component> backend_list;
  for (const Backend& backend : backends()) {
    const bool mpi = backend.kind == CpuOperations::kMpi;
    const bool is_nccl = std::string(backend.name) == "nccl";
    std::string detail = backend.description;
    if (mpi && !mpi_detail.empty()) detail += "; " + mpi_detail;
    if (is_nccl && nccl != 0) {
      detail += "; NCCL " + std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) +
                "." + std::to_string(nccl % 100);
    }
    backend_list.push_back({backend.built, mpi ? "MPI" : is_nccl ? "NCCL" : backend.name, detail});
  }
  printSection("Backends", backend_list);
  printSection("Devices", {{cudaBuilt(), "CUDA", "device fusion kernels (src/cuda)"}});
  printSection("Frontends",
               {
                   {true, "C++", "include/ronde"},
                   {RONDE_BUILD_HAS_LIBTORCH != 0, "LibTorch", RONDE_BUILD_LIBTORCH_VERSION},
               });
  printSection("Python frontends", pythonFrontends(python.empty() ? "python3" : python));
  if (print_settings) printSettings();
  return 0;
}

}  // namespace ronde::launcher
