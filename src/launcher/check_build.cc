// `ronde check-build`: what this build of ronde has, the way `horovodrun --check-build`
// shows it. Transports and backends are known from the build; the PyTorch frontend is looked
// up at run time, without importing torch, so the command stays fast.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

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

// One line of output from a short command, or "" when it fails or takes over two seconds.
std::string firstLineOf(const std::vector<std::string>& argv) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  std::unique_ptr<ChildProcess> child;
  try {
    child = std::make_unique<ChildProcess>(ChildProcess::spawn({argv, environment, false}));
  } catch (const std::exception&) {
    return "";
  }
  UniqueFd out = child->takeStdout();
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
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
  return text.substr(0, text.find('\n'));
}

// Whether `import ronde.torch` would find the package, and torch's version; no import of torch.
Component pytorchFrontend() {
  const char* probe =
      "import importlib.util, importlib.metadata\n"
      "try:\n"
      "    found = importlib.util.find_spec('ronde.torch') is not None\n"
      "except Exception:\n"
      "    found = False\n"
      "try:\n"
      "    torch = importlib.metadata.version('torch')\n"
      "except Exception:\n"
      "    torch = ''\n"
      "print(('yes' if found else 'no') + ' ' + torch)\n";
  std::string answer = firstLineOf({"python3", "-c", probe});
  Component component{false, "PyTorch", ""};
  if (answer.rfind("yes", 0) == 0) {
    component.present = true;
    std::string torch = answer.substr(3);
    while (!torch.empty() && torch.front() == ' ') torch.erase(0, 1);
    component.detail = torch.empty() ? "ronde.torch" : "torch " + torch;
  } else if (answer.empty()) {
    component.detail = "no python3";
  }
  return component;
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

int checkBuild(bool print_settings) {
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
  printSection("Backends", {
                               {true, "native", "ronde's own collectives"},
                               {RONDE_BUILD_HAS_MPI != 0, "MPI", mpi_detail},
                               {RONDE_BUILD_HAS_NCCL != 0, "NCCL", ""},
                           });
  printSection("Frontends",
               {
                   {true, "C++", "include/ronde"},
                   {RONDE_BUILD_HAS_LIBTORCH != 0, "LibTorch", RONDE_BUILD_LIBTORCH_VERSION},
                   pytorchFrontend(),
               });
  if (print_settings) printSettings();
  return 0;
}

}  // namespace ronde::launcher
