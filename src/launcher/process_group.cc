#include "launcher/process_group.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <tuple>
#include <utility>

#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

std::pair<UniqueFd, UniqueFd> makePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw makeError(ErrorCode::kIo, "pipe: ", std::strerror(errno));
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::string lookupPath(const std::vector<std::string>& environment) {
  for (const std::string& entry : environment) {
    if (entry.rfind("PATH=", 0) == 0) return entry.substr(5);
  }
  return "/usr/local/bin:/usr/bin:/bin";
}

bool isExecutableFile(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& text : strings) result.push_back(text.data());
  result.push_back(nullptr);
  return result;
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void execChild(pid_t parent, int stdin_fd, int stdout_fd, int stderr_fd, int error_fd,
                            const char* path, char* const* argv, char* const* envp,
                            const cpu_set_t* cpus) {
  ::setpgid(0, 0);
  // Before exec, so that every thread the worker starts inherits the binding.
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0) {
    int error = errno;
    (void)!::write(error_fd, &error, sizeof(error));
    ::_exit(127);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) {
    ::sigaction(sig, &default_action, nullptr);
  }
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0) {
    int error = errno;
    (void)!::write(error_fd, &error, sizeof(error));
    ::_exit(127);
  }
  ::execve(path, argv, envp);
  int error = errno;
  (void)!::write(error_fd, &error, sizeof(error));
  ::_exit(127);
}

}  // namespace

std::string findExecutable(const std::string& name, const std::string& search_path) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return isExecutableFile(name) ? name : "";
  std::stringstream directories(search_path);
  std::string directory;
  while (std::getline(directories, directory, ':')) {
    std::string candidate = (directory.empty() ? "." : directory) + "/" + name;
    if (isExecutableFile(candidate)) return candidate;
  }
  return "";
}

ChildProcess ChildProcess::spawn(const SpawnRequest& request) {
  RONDE_CHECK(!request.argv.empty());
  std::string path = findExecutable(request.argv[0], lookupPath(request.environment));
  if (path.empty()) {
    throw makeError(ErrorCode::kInvalidArgument, request.argv[0],
                    request.argv[0].find('/') == std::string::npos ? ": command not found on PATH"
                                                                   : ": no such executable file");
  }

  // Everything the child needs is laid out before fork: the child may not allocate.
  std::vector<std::string> argv_storage = request.argv;
  std::vector<std::string> env_storage = request.environment;
  std::vector<char*> argv = pointers(argv_storage);
  std::vector<char*> envp = pointers(env_storage);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : request.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }

  UniqueFd stdin_read;
  UniqueFd stdin_write;
  if (request.stdin_pipe) {
    std::tie(stdin_read, stdin_write) = makePipe();
  } else {
    stdin_read.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!stdin_read) throw makeError(ErrorCode::kIo, "open /dev/null: ", std::strerror(errno));
  }
  auto [stdout_read, stdout_write] = makePipe();
  auto [stderr_read, stderr_write] = makePipe();
  auto [error_read, error_write] = makePipe();

  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw makeError(ErrorCode::kIo, "fork: ", std::strerror(errno));
  if (pid == 0) {
    execChild(parent, stdin_read.get(), stdout_write.get(), stderr_write.get(), error_write.get(),
              path.c_str(), argv.data(), envp.data(), request.cpus.empty() ? nullptr : &cpus);
  }
  // Set the group from both sides, so it is in place before anyone signals it.
  ::setpgid(pid, pid);

  ChildProcess child;
  child.pid_ = pid;
  child.stdin_ = std::move(stdin_write);
  child.stdout_ = std::move(stdout_read);
  child.stderr_ = std::move(stderr_read);

  // The error pipe closes on a successful exec; a message means exec failed.
  error_write.reset();
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(error_read.get(), &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  if (got == sizeof(exec_errno)) {
    while (!child.poll()) ::usleep(1000);
    throw makeError(ErrorCode::kInvalidArgument, "cannot execute ", path, ": ",
                    std::strerror(exec_errno));
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      exited_(other.exited_),
      status_(other.status_),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)) {}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0 || exited_) return;
  signalGroup(SIGKILL);
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

bool ChildProcess::writeStdin(const std::string& data) {
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = ::write(stdin_.get(), data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<size_t>(n);
  }
  return true;
}

bool ChildProcess::poll() {
  if (exited_ || pid_ <= 0) return exited_;
  int status = 0;
  pid_t result = ::waitpid(pid_, &status, WNOHANG);
  if (result == pid_) {
    exited_ = true;
    status_ = status;
  }
  return exited_;
}

void ChildProcess::signalGroup(int signal) const {
  if (pid_ > 0) ::kill(-pid_, signal);
}

std::string describeWaitStatus(int status) {
  std::ostringstream out;
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    out << "killed by signal " << sig << " (" << ::strsignal(sig) << ")";
  } else {
    out << "exited with code " << WEXITSTATUS(status);
  }
  return out.str();
}

int exitCodeForWaitStatus(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace ronde::launcher
