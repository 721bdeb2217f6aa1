// Strangers on a rank's data port during start-up: the TCP mesh must still form, and its
// collectives give the right results. Each rank publishes its listening address through a
// store that first connects the strangers to that address, so they are queued before any
// real peer can know the port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/net_address.h"
#include "common/unique_fd.h"
#include "support/multiprocess.h"

namespace ronde::testing {
namespace {

enum Stranger : unsigned {
  kSilent = 1,   // connects and never sends
  kCloses = 2,   // connects and hangs up at once (during the handshake)
  kGarbage = 4,  // sends bytes that are neither a handshake nor a greeting
};

UniqueFd connectTo(const std::string& address) {
  std::string host;
  int port = 0;
  splitHostPort(address, &host, &port);
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, host.c_str(), &peer.sin_addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0) {
    throw std::runtime_error("stranger could not connect to " + address);
  }
  return fd;
}

// Passes everything through; when this rank publishes its data address ("tcp/<rank>"), the
// strangers connect to it first. They stay open for the store's lifetime.
class StrangerStore : public Store {
 public:
  StrangerStore(std::shared_ptr<Store> inner, int rank, unsigned strangers)
      : inner_(std::move(inner)), key_("tcp/" + std::to_string(rank)), strangers_(strangers) {}

  void set(const std::string& key, const Bytes& value) override {
    if (key.size() >= key_.size() &&
        key.compare(key.size() - key_.size(), key_.size(), key_) == 0) {
      const std::string address(value.begin(), value.end());
      if (strangers_ & kCloses) connectTo(address).reset();
      if (strangers_ & kGarbage) {
        UniqueFd fd = connectTo(address);
        const std::string junk(100, '\x5a');
        if (::send(fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL) < 0) {
          throw std::runtime_error("stranger could not send");
        }
        held_.push_back(std::move(fd));
      }
      if (strangers_ & kSilent) held_.push_back(connectTo(address));
    }
    inner_->set(key, value);
  }
  Bytes get(const std::string& key, Duration timeout) override { return inner_->get(key, timeout); }
  bool tryGet(const std::string& key, Bytes* value) override { return inner_->tryGet(key, value); }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  void erase(const std::string& key) override { inner_->erase(key); }

 private:
  std::shared_ptr<Store> inner_;
  const std::string key_;
  const unsigned strangers_;
  std::vector<UniqueFd> held_;
};

struct StrangerCase {
  int size;
  unsigned strangers;
  bool secret;
};

std::string describe(const StrangerCase& c) {
  std::string name = std::to_string(c.size) + "Ranks";
  if (c.strangers & kSilent) name += "Silent";
  if (c.strangers & kCloses) name += "Closes";
  if (c.strangers & kGarbage) name += "Garbage";
  return name + (c.secret ? "WithSecret" : "NoSecret");
}

std::string caseName(const ::testing::TestParamInfo<StrangerCase>& info) {
  return describe(info.param);
}

void PrintTo(const StrangerCase& c, std::ostream* out) { *out << describe(c); }

class TcpMeshStrangersTest : public ::testing::TestWithParam<StrangerCase> {};

TEST_P(TcpMeshStrangersTest, MeshFormsAndCollectivesAreRight) {
  const StrangerCase c = GetParam();
  RankSpec spec;
  spec.size = c.size;
  spec.transport = TransportKind::kTcp;
  spec.secret = c.secret ? "mesh-secret" : "";
  spec.timeout_seconds = 90;
  auto outcomes = runProcessesRaw(spec, [&](int rank, int port) {
    auto store = std::make_shared<StrangerStore>(connectStore(spec, port), rank, c.strangers);
    auto comm = makeCommunicator(spec, rank, spec.size, store);
    if (comm->transportName() != "tcp")
      throw std::runtime_error("not on TCP: " + comm->transportName());
    const int n = comm->size();
    std::vector<float> values(1000);
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(rank + 1) * float(i % 7);
    comm->allreduce(values.data(), values.data(), values.size(), DataType::kFloat32,
                    ReduceOp::kSum);
    for (size_t i = 0; i < values.size(); ++i) {
      const float expected = float(n * (n + 1) / 2) * float(i % 7);
      if (values[i] != expected) {
        throw std::runtime_error("allreduce element " + std::to_string(i) + " is " +
                                 std::to_string(values[i]) + ", expected " +
                                 std::to_string(expected));
      }
    }
    std::vector<int32_t> mine(3, rank * 10);
    std::vector<int32_t> all(3 * size_t(n));
    comm->allgather(mine.data(), all.data(), mine.size(), DataType::kInt32);
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] != int32_t(i / 3) * 10) throw std::runtime_error("allgather is wrong");
    }
  });
  for (const ChildOutcome& outcome : outcomes) {
    EXPECT_EQ(outcome.exit_code, 0) << "rank " << outcome.rank << ": " << outcome.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Strangers, TcpMeshStrangersTest,
                         ::testing::Values(StrangerCase{2, kSilent, true},
                                           StrangerCase{2, kCloses, true},
                                           StrangerCase{2, kGarbage, true},
                                           StrangerCase{3, kSilent | kCloses | kGarbage, true},
                                           StrangerCase{3, kSilent, true},
                                           StrangerCase{3, kCloses, true},
                                           StrangerCase{2, kSilent | kCloses | kGarbage, false}),
                         caseName);

}  // namespace
}  // namespace ronde::testing
