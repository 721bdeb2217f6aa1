#include "support/multiprocess.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "ronde/store.h"

namespace ronde::testing {
namespace {

// The write end of the pipe to the parent, in a child only.
int g_report_fd = -1;
int g_store_port = -1;

}  // namespace

int rendezvousPort() { return g_store_port; }

void reportFailure(const std::string& message) {
  if (g_report_fd < 0) {
    ADD_FAILURE() << message;
    return;
  }
  std::string line = message + "\n";
  ssize_t ignored = ::write(g_report_fd, line.data(), line.size());
  (void)ignored;
}

std::string transportLabel(TransportKind kind) { return transportKindName(kind); }

std::shared_ptr<Store> connectStore(const RankSpec& spec, int port) {
  return makeTcpStore("127.0.0.1", port, spec.secret, std::chrono::seconds(30));
}

std::unique_ptr<Communicator> makeCommunicator(const RankSpec& spec, int rank, int size,
                                               std::shared_ptr<Store> store) {
  CommOptions options;
  options.rank = rank;
  options.size = size;
  options.store = std::move(store);
  options.transport = spec.transport;
  options.secret = spec.secret;
  options.timeout = std::chrono::milliseconds(spec.collective_timeout_ms);
  options.start_timeout = std::chrono::seconds(30);
  if (!spec.hosts.empty()) options.hostname = spec.hosts[static_cast<size_t>(rank)];
  if (spec.shm_chunk_bytes > 0) options.shm_chunk_bytes = spec.shm_chunk_bytes;
  if (spec.small_allreduce_bytes >= 0) options.small_allreduce_bytes = spec.small_allreduce_bytes;
  options.shm_direct_read = spec.shm_direct_read;
  options.store_server_rank = spec.store_server_rank;
  return Communicator::create(options);
}

std::vector<ChildOutcome> runRanksRaw(const RankSpec& spec, const RankBody& body) {
  return runProcessesRaw(spec, [&](int rank, int port) {
    auto comm = makeCommunicator(spec, rank, spec.size, connectStore(spec, port));
    body(*comm);
  });
}

namespace {

// The store server runs in a process of its own, forked while the test has no thread: a
// thread alive at fork() (the server's) leaves the children's copies of its locks held, which
// hangs children under ASan and TSan. The server's port comes back through a pipe; the server
// lives until its lifeline pipe closes (the parent is done, or died).
class StoreServerProcess {
 public:
  explicit StoreServerProcess(const std::string& secret) {
    int port_pipe[2];
    int lifeline[2];
    if (::pipe(port_pipe) != 0 || ::pipe(lifeline) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(port_pipe[0]);
      ::close(lifeline[1]);
      serve(secret, port_pipe[1], lifeline[0]);
    }
    ::close(port_pipe[1]);
    ::close(lifeline[0]);
    lifeline_ = lifeline[1];
    int32_t port = -1;
    pollfd p{port_pipe[0], POLLIN, 0};
    if (::poll(&p, 1, 30000) != 1 || ::read(port_pipe[0], &port, sizeof port) != sizeof port) {
      port = -1;
    }
    ::close(port_pipe[0]);
    if (port < 0) {
      stop();
      throw std::runtime_error("the test's store server process did not start within 30 s");
    }
    port_ = port;
  }
  ~StoreServerProcess() { stop(); }
  StoreServerProcess(const StoreServerProcess&) = delete;
  StoreServerProcess& operator=(const StoreServerProcess&) = delete;

  int port() const { return port_; }

  // In a forked rank: let go of the lifeline, so that only the parent keeps the server alive.
  void leaveInChild() {
    ::close(lifeline_);
    lifeline_ = -1;
    pid_ = -1;
  }

 private:
  [[noreturn]] static void serve(const std::string& secret, int port_fd, int lifeline_fd) {
    int code = 0;
    try {
      TcpStoreServer server("127.0.0.1", 0, secret);
      int32_t port = server.port();
      if (::write(port_fd, &port, sizeof port) != sizeof port) ::_exit(1);
      ::close(port_fd);
      char byte;
      while (::read(lifeline_fd, &byte, 1) != 0) {  // EOF: the parent closed it or died
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "test store server: %s\n", e.what());
      code = 1;
    }
    ::_exit(code);
  }

  void stop() {
    if (lifeline_ >= 0) ::close(lifeline_);
    lifeline_ = -1;
    if (pid_ <= 0) return;
    // The server exits at EOF on its lifeline; one stuck for 10 s is killed.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int lifeline_ = -1;
  int port_ = -1;
};

}  // namespace

std::vector<ChildOutcome> runProcessesRaw(const RankSpec& spec, const ProcessBody& body) {
  StoreServerProcess server(spec.secret);
  const int port = server.port();
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int rank = 0; rank < spec.size; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = ::fork();
    if (pid == 0) {
      server.leaveInChild();
      ::close(fds[0]);
      g_report_fd = fds[1];
      g_store_port = port;
      int code = 0;
      try {
        body(rank, port);
        if (::testing::Test::HasFailure()) code = 1;
      } catch (const std::exception& e) {
        reportFailure(std::string("rank ") + std::to_string(rank) + " threw: " + e.what());
        code = 1;
      }
      ::close(fds[1]);
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }

  std::vector<ChildOutcome> outcomes(static_cast<size_t>(spec.size));
  std::vector<bool> done(static_cast<size_t>(spec.size), false);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(spec.timeout_seconds);
  int remaining = spec.size;
  while (remaining > 0) {
    // Drain the pipes so that a chatty child never blocks on a full pipe.
    for (int rank = 0; rank < spec.size; ++rank) {
      pollfd p{pipes[static_cast<size_t>(rank)], POLLIN, 0};
      while (p.fd >= 0 && ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
        char buffer[4096];
        ssize_t n = ::read(p.fd, buffer, sizeof(buffer));
        if (n <= 0) break;
        outcomes[static_cast<size_t>(rank)].message.append(buffer, static_cast<size_t>(n));
      }
    }
    for (int rank = 0; rank < spec.size; ++rank) {
      if (done[static_cast<size_t>(rank)]) continue;
      int status = 0;
      pid_t got = ::waitpid(pids[static_cast<size_t>(rank)], &status, WNOHANG);
      if (got == 0) continue;
      done[static_cast<size_t>(rank)] = true;
      --remaining;
      ChildOutcome& outcome = outcomes[static_cast<size_t>(rank)];
      outcome.rank = rank;
      if (WIFEXITED(status)) {
        outcome.exit_code = WEXITSTATUS(status);
      } else {
        outcome.exit_code = -1;
        outcome.signal = WTERMSIG(status);
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int rank = 0; rank < spec.size; ++rank) {
        if (!done[static_cast<size_t>(rank)]) {
          ::kill(pids[static_cast<size_t>(rank)], SIGKILL);
          outcomes[static_cast<size_t>(rank)].message += "(killed by the test: still running after " +
                                                        std::to_string(spec.timeout_seconds) + " s)";
        }
      }
      deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int rank = 0; rank < spec.size; ++rank) {
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(pipes[static_cast<size_t>(rank)], buffer, sizeof(buffer))) > 0) {
      outcomes[static_cast<size_t>(rank)].message.append(buffer, static_cast<size_t>(n));
    }
    ::close(pipes[static_cast<size_t>(rank)]);
  }
  return outcomes;
}

void runRanks(const RankSpec& spec, const RankBody& body) {
  for (const ChildOutcome& outcome : runRanksRaw(spec, body)) {
    if (outcome.exit_code != 0) {
      ADD_FAILURE() << "rank " << outcome.rank << " of " << spec.size << " ("
                    << transportLabel(spec.transport) << ") failed"
                    << (outcome.signal ? " with signal " + std::to_string(outcome.signal) : "")
                    << ": " << outcome.message;
    }
  }
}

}  // namespace ronde::testing
