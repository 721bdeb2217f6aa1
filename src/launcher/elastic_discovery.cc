#include "launcher/elastic_discovery.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

bool isHostNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
         c == '@';
}

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t\r");
  return text.substr(begin, end - begin + 1);
}

// Appends what `fd` has now to `out`; closes it at end of file.
void readAvailable(UniqueFd& fd, std::string* out) {
  char buffer[4096];
  while (fd) {
    ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got > 0) {
      out->append(buffer, static_cast<size_t>(got));
      if (out->size() > (1 << 20)) fd.reset();  // a script printing without end is cut off
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    fd.reset();
  }
}

}  // namespace

std::vector<HostSlots> parseDiscoveryOutput(const std::string& output, const std::string& script,
                                            int default_slots) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::istringstream lines(output);
  std::string raw;
  int number = 0;
  while (std::getline(lines, raw)) {
    ++number;
    std::string line = trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return makeError(ErrorCode::kInvalidArgument, "host discovery script ", script, " line ",
                       number, ": '", trim(raw), "' ", why);
    };
    size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    if (name.empty() || !std::all_of(name.begin(), name.end(), isHostNameChar)) {
      throw bad("is not 'host' or 'host:slots'");
    }
    int slots = default_slots;
    if (colon != std::string::npos) {
      std::string count = line.substr(colon + 1);
      if (count.empty() || count.size() > 6 || !std::all_of(count.begin(), count.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
          })) {
        throw bad("has a slot count that is not a whole number");
      }
      slots = std::stoi(count);
      if (slots < 1) throw bad("has no slots (the count must be at least 1)");
    }
    if (!seen.insert(name).second) throw bad("names a host listed before");
    hosts.push_back({name, slots});
  }
  return hosts;
}

void checkDiscoveryScript(const std::string& script) {
  struct stat info;
  if (::stat(script.c_str(), &info) != 0) {
    throw makeError(ErrorCode::kInvalidArgument, "host discovery script ", script, ": ",
                    std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode) || ::access(script.c_str(), X_OK) != 0) {
    throw makeError(ErrorCode::kInvalidArgument, "host discovery script ", script,
                    " is not an executable file (chmod +x it)");
  }
}

DiscoveryRun::DiscoveryRun(const std::string& script, std::vector<std::string> environment,
                           int default_slots, std::chrono::milliseconds timeout)
    : script_(script),
      default_slots_(default_slots),
      deadline_(std::chrono::steady_clock::now() + timeout) {
  try {
    checkDiscoveryScript(script);
    // A path, so that a bare name is not looked up on PATH instead of in this directory.
    std::string path = script.find('/') == std::string::npos ? "./" + script : script;
    child_ = std::make_unique<ChildProcess>(
        ChildProcess::spawn({{path}, std::move(environment), false, {}}));
  } catch (const Error& error) {
    failed_to_start_ = DiscoveryResult{false, {}, error.what()};
    return;
  }
  stdout_ = child_->takeStdout();
  stderr_ = child_->takeStderr();
  for (int fd : {stdout_.get(), stderr_.get()}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
}

DiscoveryRun::~DiscoveryRun() = default;  // ChildProcess kills and reaps a script still running

std::optional<DiscoveryResult> DiscoveryRun::poll() {
  if (failed_to_start_) return failed_to_start_;
  readAvailable(stdout_, &output_);
  readAvailable(stderr_, &errors_);
  bool exited = child_->poll();
  if (!exited || stdout_) {
    if (std::chrono::steady_clock::now() < deadline_) return std::nullopt;
    child_->signalGroup(SIGKILL);
    while (!child_->poll()) ::usleep(1000);
    return DiscoveryResult{
        false,
        {},
        "host discovery script " + script_ + " did not finish in time (--host-discovery-timeout)"};
  }
  int status = child_->waitStatus();
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    std::string said = errors_.substr(0, errors_.find('\n'));
    return DiscoveryResult{false,
                           {},
                           "host discovery script " + script_ + " " + describeWaitStatus(status) +
                               (said.empty() ? "" : ": " + said)};
  }
  try {
    return DiscoveryResult{true, parseDiscoveryOutput(output_, script_, default_slots_), ""};
  } catch (const Error& error) {
    return DiscoveryResult{false, {}, error.what()};
  }
}

}  // namespace ronde::launcher
