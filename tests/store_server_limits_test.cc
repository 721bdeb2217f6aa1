// The TCP store server under resource pressure: out of file descriptors it must neither spin
// on its readable listener nor flood the log, and serve again once descriptors are free;
// connections that never prove the secret are capped so that real clients still get in.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {
namespace {

using namespace std::chrono_literals;

UniqueFd connectRaw(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(uint16_t(port));
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// Reads one value of T from a pipe, giving up after `timeout`.
template <typename T>
bool readWithin(int fd, T* value, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, int(timeout.count())) != 1) return false;
  return ::read(fd, value, sizeof(T)) == ssize_t(sizeof(T));
}

double cpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

long contextSwitches() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_nvcsw + usage.ru_nivcsw;
}

int countLines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  return lines;
}

// Waits (bounded) until the peer closes `fd`, reading and discarding what it sent first.
bool closedByPeer(int fd, std::chrono::steady_clock::time_point deadline) {
  char buffer[256];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) != 1) return false;
    ssize_t got = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

// A forked child serves the store with RLIMIT_NOFILE lowered and every descriptor used up;
// the parent connects (the kernel completes it, so the listener stays readable) and a real
// client waits. Over one second the child's CPU time shows whether the server spins; the
// child's stderr shows whether it floods the log; then the child frees descriptors and the
// waiting client must be served.
TEST(TcpStoreServerLimits, OutOfDescriptorsItRestsLogsOnceAndRecovers) {
  const std::string log_path =
      ::testing::TempDir() + "ronde_store_emfile_" + std::to_string(::getpid()) + ".log";
  int to_parent[2];
  int to_child[2];
  ASSERT_EQ(::pipe2(to_parent, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(to_child, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int log_fd = ::open(log_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    ::dup2(log_fd, STDERR_FILENO);
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = 128;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(2);
    int code = 0;
    try {
      TcpStoreServer server("127.0.0.1", 0, "secret");
      std::vector<UniqueFd> filler;
      for (;;) {
        UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!fd) break;
        filler.push_back(std::move(fd));
      }
      const int port = server.port();
      if (::write(to_parent[1], &port, sizeof(port)) != sizeof(port)) ::_exit(5);
      char go = 0;
      if (!readWithin(to_child[0], &go, 10s)) ::_exit(3);
      const double before = cpuSeconds();
      std::this_thread::sleep_for(1s);
      const double used = cpuSeconds() - before;
      filler.clear();
      if (::write(to_parent[1], &used, sizeof(used)) != sizeof(used)) ::_exit(5);
      char done = 0;
      if (!readWithin(to_child[0], &done, 30s)) code = 4;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "child: %s\n", error.what());
      code = 1;
    }
    ::_exit(code);
  }
  int port = 0;
  ASSERT_TRUE(readWithin(to_parent[0], &port, 10s)) << "the child did not start its server";
  UniqueFd waiting = connectRaw(port);  // accepted by the kernel, not by the server
  std::atomic<bool> served{false};
  std::thread client([&] {
    try {
      auto store = makeTcpStore("127.0.0.1", port, "secret", 20000ms);
      store->setString("k", "v");
      served = store->getString("k", 5000ms) == "v";
    } catch (const Error& error) {
      ADD_FAILURE() << "the client was not served after descriptors were freed: " << error.what();
    }
  });
  const char go = 'g';
  ASSERT_EQ(::write(to_child[1], &go, 1), 1);
  double used = -1;
  const bool measured = readWithin(to_parent[0], &used, 15s);
  client.join();
  const char done = 'd';
  EXPECT_EQ(::write(to_child[1], &done, 1), 1);
  int status = 0;
  for (int i = 0; i < 300 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
  const int log_lines = countLines(log_path);
  std::ifstream log_text(log_path);
  std::string first_line;
  std::getline(log_text, first_line);
  std::remove(log_path.c_str());

  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  ASSERT_TRUE(measured) << "the child did not report its CPU time";
  // A spinning loop burns most of the second; resting costs a few wake-ups.
  EXPECT_LT(used, 0.1) << "the server used " << used << " s of CPU in 1 s out of descriptors";
  // One line when accept starts failing, one when it works again.
  EXPECT_LE(log_lines, 4) << "the server wrote " << log_lines
                          << " log lines, the first: " << first_line;
  EXPECT_NE(first_line.find("Too many open files"), std::string::npos) << first_line;
  EXPECT_TRUE(served);
}

// More silent connections than the cap: the server holds at most the cap of them, drops the
// oldest for newcomers (their handshake timeout alone would take a minute here), and a real
// client that connects after all of them is still served.
TEST(TcpStoreServerLimits, SilentConnectionsBeyondTheCapDoNotLockOutRealClients) {
  constexpr size_t kCap = 8;
  constexpr int kSilent = 3 * kCap;
  TcpStoreServer::Limits limits;
  limits.max_unauthenticated = kCap;
  limits.handshake_timeout = 60000ms;
  limits.evictable_after = 200ms;
  ::testing::internal::CaptureStderr();
  TcpStoreServer server("127.0.0.1", 0, "secret", limits);
  std::vector<UniqueFd> silent;
  for (int i = 0; i < kSilent; ++i) silent.push_back(connectRaw(server.port()));

  auto store = makeTcpStore("127.0.0.1", server.port(), "secret", 20000ms);
  store->setString("k", "v");
  EXPECT_EQ(store->getString("k", 5000ms), "v");

  // Every silent connection but the last `kCap` accepted was dropped for a newcomer.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  int closed = 0;
  for (auto& fd : silent) {
    // Dropped ones are closed already; the few still held are not, and cost 100 ms each.
    const auto until = std::min(deadline, std::chrono::steady_clock::now() + 100ms);
    if (closedByPeer(fd.get(), until)) ++closed;
  }
  EXPECT_GE(closed, kSilent - int(kCap)) << "the server still holds too many silent connections";

  // Full again, with every pending one past evictable_after and no newcomer: the server must
  // sleep in poll(), not wake every millisecond (each wake-up is a context switch).
  for (int held = kSilent - closed; held < int(kCap); ++held) {
    silent.push_back(connectRaw(server.port()));
  }
  std::this_thread::sleep_for(2 * limits.evictable_after);
  const long switches_before = contextSwitches();
  const double cpu_before = cpuSeconds();
  std::this_thread::sleep_for(500ms);
  const long switches = contextSwitches() - switches_before;
  const double cpu = cpuSeconds() - cpu_before;
  EXPECT_LT(switches, 50) << "the server woke " << switches << " times in 0.5 s while full";
  EXPECT_LT(cpu, 0.05) << "the server used " << cpu << " s of CPU in 0.5 s while full";
  const std::string log = ::testing::internal::GetCapturedStderr();
  int lines = 0;
  for (char c : log) lines += c == '\n';
  EXPECT_LE(lines, 4) << log;
}

}  // namespace
}  // namespace ronde
