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
  return Communicator::create(options);
}

std::vector<ChildOutcome> runRanksRaw(const RankSpec& spec, const RankBody& body) {
  return runProcessesRaw(spec, [&](int rank, int port) {
    auto comm = makeCommunicator(spec, rank, spec.size, connectStore(spec, port));
    body(*comm);
  });
}

std::vector<ChildOutcome> runProcessesRaw(const RankSpec& spec, const ProcessBody& body) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, spec.secret);
  const int port = server->port();
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int rank = 0; rank < spec.size; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = ::fork();
    if (pid == 0) {
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
