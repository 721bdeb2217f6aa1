// The three stores share one contract, so most tests run against each kind; the TCP server's
// own duties (ports, secrets, many clients, late start) follow at the end.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {
namespace {

using namespace std::chrono_literals;

Bytes bytesOf(const std::string& text) { return Bytes(text.begin(), text.end()); }

// Runs `body(i)` in `count` forked children and checks each exits cleanly. Children leave
// with _exit so they never run the parent's gtest teardown.
void runInChildren(int count, const std::function<void(int)>& body) {
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        body(i);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "child %d: %s\n", i, error.what());
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

// A port nothing listens on right now (bound once by the kernel's choice, then released).
int unusedPort() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

bool somethingListensOn(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(uint16_t(port));
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

// A TcpStoreServer in a child process of its own, which a test can stop (SIGSTOP: the kernel
// still accepts its connections, nobody answers) and must kill. Port 0 when it did not start.
struct ServerProcess {
  pid_t pid = -1;
  int port = 0;
};

ServerProcess startServerProcess(const std::string& secret) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    TcpStoreServer server("127.0.0.1", 0, secret);
    const int port = server.port();
    (void)!::write(pipe_fds[1], &port, sizeof(port));
    for (;;) ::pause();  // until the test kills it
  }
  ServerProcess started;
  started.pid = pid;
  if (pid > 0 && ::read(pipe_fds[0], &started.port, sizeof(started.port)) != sizeof(int)) {
    started.port = 0;
  }
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  return started;
}

// SIGSTOP is asynchronous: returns once the process has stopped.
bool stopProcess(pid_t pid) {
  ::kill(pid, SIGSTOP);
  int status = 0;
  return ::waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status);
}

enum class Kind { kMemory, kFile, kTcp };

// Owns whatever backs the store (a temp directory, a server) and hands out clients of it.
class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kFile) {
      // Parameterised test names hold '/': flatten them so one directory is made and removed.
      std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
      for (char& c : name) {
        if (c == '/' || c == '\\') c = '_';
      }
      directory_ = (std::filesystem::temp_directory_path() /
                    ("ronde_store_test_" + std::to_string(::getpid()) + "_" + name))
                       .string();
      std::filesystem::remove_all(directory_);
    }
    if (GetParam() == Kind::kTcp) server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "s3cret");
    if (GetParam() == Kind::kMemory) memory_ = makeMemoryStore();
  }

  void TearDown() override {
    if (!directory_.empty()) std::filesystem::remove_all(directory_);
  }

  // A new client; for the memory store, the one shared store (there is no other kind).
  std::shared_ptr<Store> client() {
    switch (GetParam()) {
      case Kind::kMemory: return memory_;
      case Kind::kFile: return makeFileStore(directory_);
      case Kind::kTcp: return makeTcpStore("127.0.0.1", server_->port(), "s3cret", 5000ms);
    }
    return nullptr;
  }

  bool crossesProcesses() const { return GetParam() != Kind::kMemory; }

  std::string directory_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> memory_;
};

TEST_P(StoreTest, SetThenGetAndTryGet) {
  auto store = client();
  store->set("alpha", bytesOf("one"));
  EXPECT_EQ(store->get("alpha", 1000ms), bytesOf("one"));
  Bytes value;
  EXPECT_TRUE(store->tryGet("alpha", &value));
  EXPECT_EQ(value, bytesOf("one"));
  EXPECT_FALSE(store->tryGet("beta", &value));

  store->set("alpha", bytesOf("two"));  // set overwrites
  EXPECT_EQ(store->getString("alpha", 1000ms), "two");

  store->erase("alpha");
  EXPECT_FALSE(store->tryGet("alpha", &value));
  store->erase("never-set");  // erasing a missing key is fine
}

TEST_P(StoreTest, TryGetWithinAnswersAsTryGetWhenTheStoreAnswers) {
  auto store = client();
  store->set("alpha", bytesOf("one"));
  Bytes value;
  EXPECT_TRUE(store->tryGetWithin("alpha", &value, 5000ms));
  EXPECT_EQ(value, bytesOf("one"));
  EXPECT_FALSE(store->tryGetWithin("beta", &value, 5000ms));
  value.clear();  // no bound at all, as a caller without a deadline passes it
  EXPECT_TRUE(store->tryGetWithin("alpha", &value, Duration::max()));
  EXPECT_EQ(value, bytesOf("one"));
  PrefixStore job(store, "job");
  job.set("alpha", bytesOf("two"));
  EXPECT_TRUE(job.tryGetWithin("alpha", &value, 5000ms));
  EXPECT_EQ(value, bytesOf("two"));
}

TEST_P(StoreTest, ValuesAreOpaqueBytesAndKeysArbitraryText) {
  auto store = client();
  Bytes binary = {0, 1, 2, 0xff, 0, '\n', '/'};
  const std::string odd_key = "a/b/../c d%2F\n\xc3\xa9";
  store->set(odd_key, binary);
  store->set("", bytesOf("empty key"));
  store->set("empty value", Bytes());
  EXPECT_EQ(store->get(odd_key, 1000ms), binary);
  EXPECT_EQ(store->getString("", 1000ms), "empty key");
  EXPECT_EQ(store->get("empty value", 1000ms), Bytes());
  EXPECT_FALSE(store->tryGet("a/b/../c d/\n\xc3\xa9", nullptr));  // escaping keeps keys apart

  const std::string long_key(1000, 'k');
  Bytes large(3 * 1024 * 1024);
  for (size_t i = 0; i < large.size(); ++i) large[i] = uint8_t(i * 31);
  store->set(long_key, large);
  EXPECT_EQ(store->get(long_key, 1000ms), large);
  EXPECT_FALSE(store->tryGet(std::string(999, 'k') + "j", nullptr));
}

TEST_P(StoreTest, GetWaitsForALaterSetFromAnotherThread) {
  auto reader = client();
  auto writer = client();
  std::thread late_writer([&] {
    std::this_thread::sleep_for(100ms);
    writer->setString("late", "arrived");
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(reader->getString("late", 5000ms), "arrived");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 80ms);
  late_writer.join();
}

TEST_P(StoreTest, GetTimesOutWithAnErrorNamingTheKey) {
  auto store = client();
  const auto start = std::chrono::steady_clock::now();
  try {
    store->get("missing/key", 200ms);
    FAIL() << "get of a missing key returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(error.what()).find("missing/key"), std::string::npos) << error.what();
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 190ms);
  EXPECT_LT(waited, 2000ms);
  // The store stays usable after a timeout.
  store->setString("after", "ok");
  EXPECT_EQ(store->getString("after", 1000ms), "ok");
}

TEST_P(StoreTest, AddCountsFromZeroAndRejectsNonIntegers) {
  auto store = client();
  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", -7), -2);
  EXPECT_EQ(store->getString("counter", 1000ms), "-2");
  store->setString("text", "not a number");
  try {
    store->add("text", 1);
    FAIL() << "add on text succeeded";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("text"), std::string::npos);
  }
  EXPECT_EQ(store->getString("text", 1000ms), "not a number");
}

TEST_P(StoreTest, AddIsAtomicAcrossThreads) {
  constexpr int kThreads = 6;
  constexpr int kAddsPerThread = 100;
  auto shared = client();  // one client used by all threads: it must be thread-safe
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto own = client();
      for (int i = 0; i < kAddsPerThread; ++i) {
        seen[t].push_back((i % 2 ? own : shared)->add("hits", 1));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(client()->getString("hits", 1000ms), std::to_string(kThreads * kAddsPerThread));
  // Every add saw a distinct value: no two read-modify-writes interleaved.
  std::vector<int64_t> all;
  for (auto& values : seen) all.insert(all.end(), values.begin(), values.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
}

TEST_P(StoreTest, AddIsAtomicAcrossProcesses) {
  if (!crossesProcesses()) GTEST_SKIP() << "the memory store lives in one process";
  constexpr int kChildren = 4;
  constexpr int kAddsPerChild = 50;
  runInChildren(kChildren, [&](int) {
    auto store = client();
    for (int i = 0; i < kAddsPerChild; ++i) store->add("hits", 2);
  });
  EXPECT_EQ(client()->add("hits", 0), 2 * kChildren * kAddsPerChild);
}

TEST_P(StoreTest, GetWaitsForALaterSetFromAnotherProcess) {
  if (!crossesProcesses()) GTEST_SKIP() << "the memory store lives in one process";
  std::thread parent_writer([&] {
    std::this_thread::sleep_for(200ms);
    client()->setString("from-parent", "hello");
  });
  // Children wait on the parent's key, then answer with keys of their own.
  runInChildren(3, [&](int i) {
    auto store = client();
    std::string greeting = store->getString("from-parent", 5000ms);
    store->setString("from-child/" + std::to_string(i), greeting + " back");
  });
  parent_writer.join();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(client()->getString("from-child/" + std::to_string(i), 1000ms), "hello back");
  }
}

TEST_P(StoreTest, PrefixStoresDoNotSeeEachOthersKeys) {
  auto inner = client();
  PrefixStore first(inner, "generation/1");
  PrefixStore second(inner, "generation/2");
  first.setString("rank0", "a");
  second.setString("rank0", "b");
  EXPECT_EQ(first.getString("rank0", 1000ms), "a");
  EXPECT_EQ(second.getString("rank0", 1000ms), "b");
  EXPECT_EQ(inner->getString("generation/1/rank0", 1000ms), "a");
  EXPECT_FALSE(inner->tryGet("rank0", nullptr));

  EXPECT_EQ(first.add("count", 1), 1);
  EXPECT_EQ(second.add("count", 10), 10);
  first.erase("rank0");
  EXPECT_FALSE(first.tryGet("rank0", nullptr));
  EXPECT_TRUE(second.tryGet("rank0", nullptr));
  try {
    first.get("absent", 50ms);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(error.what()).find("generation/1/absent"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest,
                         ::testing::Values(Kind::kMemory, Kind::kFile, Kind::kTcp),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           switch (info.param) {
                             case Kind::kMemory: return "Memory";
                             case Kind::kFile: return "File";
                             case Kind::kTcp: return "Tcp";
                           }
                           return "Unknown";
                         });

// ---- The TCP server's own duties ----

TEST(TcpStoreServer, DestructorClosesTheListeningSocketAndFreesThePort) {
  int port;
  {
    TcpStoreServer server("", 0, "");
    port = server.port();
    ASSERT_GT(port, 0);
    auto store = makeTcpStore("127.0.0.1", port, "", 2000ms);
    store->setString("k", "v");
    EXPECT_TRUE(somethingListensOn(port));
  }
  EXPECT_FALSE(somethingListensOn(port));
  TcpStoreServer again("0.0.0.0", port, "");  // rebinding the same port works at once
  EXPECT_EQ(again.port(), port);
  EXPECT_EQ(makeTcpStore("localhost", port, "", 2000ms)->add("n", 1), 1);
}

TEST(TcpStoreServer, WrongSecretIsRefusedWhileTheRightOneWorks) {
  TcpStoreServer server("127.0.0.1", 0, "right");
  auto good = makeTcpStore("127.0.0.1", server.port(), "right", 2000ms);
  good->setString("k", "v");
  try {
    makeTcpStore("127.0.0.1", server.port(), "wrong", 2000ms);
    FAIL() << "a client with the wrong secret connected";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kAuth);
    EXPECT_NE(std::string(error.what()).find("did not prove the job secret"), std::string::npos)
        << error.what();
  }
  // A client without any secret never gets an answer to a request.
  auto anonymous = makeTcpStore("127.0.0.1", server.port(), "", 2000ms);
  EXPECT_THROW(anonymous->tryGet(std::string(64, 'x'), nullptr), Error);
  EXPECT_EQ(good->getString("k", 1000ms), "v");
}

TEST(TcpStoreServer, SilentOrGarbageClientsDoNotBlockOthers) {
  TcpStoreServer server("127.0.0.1", 0, "secret");
  auto rawConnection = [&] {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(uint16_t(server.port()));
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    return fd;
  };
  UniqueFd silent = rawConnection();
  UniqueFd noisy = rawConnection();
  std::string junk(4096, '\x7f');
  EXPECT_GT(::send(noisy.get(), junk.data(), junk.size(), MSG_NOSIGNAL), 0);

  const auto start = std::chrono::steady_clock::now();
  auto good = makeTcpStore("127.0.0.1", server.port(), "secret", 2000ms);
  good->setString("k", "v");
  EXPECT_EQ(good->getString("k", 1000ms), "v");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
}

TEST(TcpStoreServer, ClientMayConnectBeforeTheServerStarts) {
  const int port = unusedPort();
  std::shared_ptr<Store> early;
  std::thread client([&] { early = makeTcpStore("127.0.0.1", port, "s", 10000ms); });
  std::this_thread::sleep_for(300ms);
  TcpStoreServer server("127.0.0.1", port, "s");
  client.join();
  ASSERT_TRUE(early);
  early->setString("k", "v");
  EXPECT_EQ(early->getString("k", 1000ms), "v");
}

TEST(TcpStoreServer, ConnectGivesUpAtItsTimeout) {
  const int port = unusedPort();
  const auto start = std::chrono::steady_clock::now();
  try {
    makeTcpStore("127.0.0.1", port, "", 300ms);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + std::to_string(port)),
              std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
}

TEST(TcpStoreServer, LostServerIsPeerLostNamingTheStore) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "");
  const int port = server->port();
  auto store = makeTcpStore("127.0.0.1", port, "", 2000ms);
  std::atomic<bool> failed_as_lost{false};
  // A GET parked on the server must end when the server goes away, not at its timeout.
  std::thread waiter([&] {
    try {
      store->get("never", 20000ms);
    } catch (const Error& error) {
      const std::string where = "rendezvous store at 127.0.0.1:" + std::to_string(port);
      failed_as_lost = error.code() == ErrorCode::kPeerLost &&
                       std::string(error.what()).find(where) != std::string::npos;
    }
  });
  std::this_thread::sleep_for(100ms);
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
  EXPECT_TRUE(failed_as_lost);
  EXPECT_THROW(store->setString("k", "v"), Error);
}

TEST(TcpStoreServer, ServesHundredsOfClientsWaitingAtOnce) {
  constexpr int kClients = 256;
  TcpStoreServer server("127.0.0.1", 0, "secret");
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(makeTcpStore("127.0.0.1", server.port(), "secret", 5000ms));
  }
  std::atomic<int> released{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      clients[i]->add("arrived", 1);
      if (clients[i]->getString("go", 20000ms) == "now") ++released;
    });
  }
  auto coordinator = makeTcpStore("127.0.0.1", server.port(), "secret", 5000ms);
  while (coordinator->add("arrived", 0) < kClients) std::this_thread::sleep_for(5ms);
  coordinator->setString("go", "now");
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(released.load(), kClients);
}

TEST(TcpStoreServer, BindsToAnExplicitAddressOnly) {
  TcpStoreServer server("127.0.0.1", 0, "");
  EXPECT_GT(server.port(), 0);
  EXPECT_THROW(TcpStoreServer("127.0.0.1", server.port(), ""), Error);  // port in use
  EXPECT_THROW(TcpStoreServer("no-such-host.invalid", 0, ""), Error);
}

// A server whose process is stopped answers nothing (the kernel still holds its connections):
// abandon() must end the call waiting on it at once, and refuse every later call.
TEST(TcpStoreServer, AbandonEndsTheCallWaitingOnAStoppedServerAndEveryLaterOne) {
  const ServerProcess server = startServerProcess("secret");
  ASSERT_GT(server.port, 0);
  const pid_t server_pid = server.pid;
  const int port = server.port;
  auto store = makeTcpStore("127.0.0.1", port, "secret", 2000ms);
  EXPECT_EQ(store->add("beats", 1), 1);

  ASSERT_TRUE(stopProcess(server_pid));
  std::atomic<int> code{-1};
  std::thread waiter([&] {
    try {
      store->add("beats", 1);  // no answer: its own bound is 10 s
      code = 0;
    } catch (const Error& error) {
      code = static_cast<int>(error.code());
    }
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(code.load(), -1) << "the call should still be waiting on the stopped server";
  const auto start = std::chrono::steady_clock::now();
  PrefixStore(store, "job").abandon();  // as the runtime does it: through the wrappers
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::kPeerLost));
  try {
    store->tryGet("beats", nullptr);
    ADD_FAILURE() << "a call after abandon() succeeded";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kPeerLost);
    EXPECT_NE(std::string(error.what()).find("given up"), std::string::npos) << error.what();
  }
  ::kill(server_pid, SIGKILL);
  ::waitpid(server_pid, nullptr, 0);
}

// A poll made while a collective waits (is there a published failure?) must not carry the wait
// past its deadline when the store's server is stopped, yet the store must serve again once
// the server continues: it was only slow, and nothing gave it up.
TEST(TcpStoreServer, TryGetWithinEndsAtItsBoundOnAStoppedServerAndTheStoreServesAfterIt) {
  const ServerProcess server = startServerProcess("secret");
  ASSERT_GT(server.port, 0);
  const pid_t server_pid = server.pid;
  const int port = server.port;
  // The request timeout of this client is a minute, as the start timeout makes it in a job.
  auto store = makeTcpStore("127.0.0.1", port, "secret", 60000ms);
  store->setString("abort/reason", "rank 2: gone");

  ASSERT_TRUE(stopProcess(server_pid));
  // Twice: the first times out on the open connection, the second on the reconnect's
  // handshake, which the stopped server's kernel accepts but nobody answers.
  for (int poll = 0; poll < 2; ++poll) {
    const auto start = std::chrono::steady_clock::now();
    try {
      store->tryGetWithin("abort/reason", nullptr, 300ms);
      ADD_FAILURE() << "a stopped server answered poll " << poll;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kTimeout) << error.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5000ms) << "poll " << poll;
  }

  ::kill(server_pid, SIGCONT);
  Bytes value;
  EXPECT_TRUE(store->tryGetWithin("abort/reason", &value, 5000ms));
  EXPECT_EQ(std::string(value.begin(), value.end()), "rank 2: gone");
  EXPECT_EQ(store->add("n", 1), 1);
  ::kill(server_pid, SIGKILL);
  ::waitpid(server_pid, nullptr, 0);
}

// One connection serves one request at a time: a poll queued behind another thread's get that
// waits for its key gives up at its own bound, and the connection is not disturbed.
TEST(TcpStoreServer, TryGetWithinQueuedBehindAWaitingGetEndsAtItsBound) {
  TcpStoreServer server("127.0.0.1", 0, "");
  auto store = makeTcpStore("127.0.0.1", server.port(), "", 60000ms);
  store->setString("k", "v");
  std::thread waiter([&] { EXPECT_THROW(store->get("never", 3000ms), Error); });
  std::this_thread::sleep_for(200ms);  // the get holds the connection now
  const auto start = std::chrono::steady_clock::now();
  try {
    store->tryGetWithin("k", nullptr, 300ms);
    ADD_FAILURE() << "the poll was answered while the get held the connection";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(error.what()).find("held the connection"), std::string::npos)
        << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
  waiter.join();
  EXPECT_EQ(store->getString("k", 1000ms), "v");
}

}  // namespace
}  // namespace ronde
