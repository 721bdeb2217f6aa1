// The handshake on a socketpair: both sides run authenticateConnection at once, as a real
// connect/accept pair would.
#include "common/secret_handshake.h"

#include <sys/socket.h>

#include <gtest/gtest.h>

#include <future>
#include <optional>

#include "common/unique_fd.h"
#include "ronde/errors.h"

namespace ronde {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct SocketPair {
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    server.reset(fds[0]);
    client.reset(fds[1]);
  }
  UniqueFd server, client;
};

// Runs both sides; returns the error code each side threw, or nullopt if it passed.
std::pair<std::optional<ErrorCode>, std::optional<ErrorCode>> handshake(
    const std::string& server_secret, const std::string& client_secret, SocketPair& pair) {
  auto side = [](int fd, std::string secret, bool is_server) -> std::optional<ErrorCode> {
    try {
      authenticateConnection(fd, secret, is_server, Clock::now() + 500ms, "peer 1.2.3.4:5");
      return std::nullopt;
    } catch (const Error& error) {
      return error.code();
    }
  };
  auto server = std::async(std::launch::async, side, pair.server.get(), server_secret, true);
  auto client = side(pair.client.get(), client_secret, false);
  return {server.get(), client};
}

TEST(SecretHandshake, SameSecretPassesAndLeavesFollowingDataUnread) {
  SocketPair pair;
  auto [server, client] = handshake("job-secret", "job-secret", pair);
  EXPECT_FALSE(server);
  EXPECT_FALSE(client);
  // The connection is still in step: data sent now arrives intact.
  ASSERT_EQ(::send(pair.client.get(), "hello", 5, 0), 5);
  char buffer[5];
  ASSERT_EQ(::recv(pair.server.get(), buffer, 5, MSG_WAITALL), 5);
  EXPECT_EQ(std::string(buffer, 5), "hello");
}

TEST(SecretHandshake, DifferentSecretsFailOnBothSides) {
  SocketPair pair;
  auto [server, client] = handshake("one", "two", pair);
  EXPECT_EQ(server, ErrorCode::kAuth);
  EXPECT_EQ(client, ErrorCode::kAuth);
}

TEST(SecretHandshake, ErrorNamesThePeer) {
  SocketPair pair;
  auto server = std::async(std::launch::async, [&] {
    try {
      authenticateConnection(pair.server.get(), "a", true, Clock::now() + 500ms, "x");
    } catch (const Error&) {
    }
  });
  try {
    authenticateConnection(pair.client.get(), "b", false, Clock::now() + 500ms, "peer 1.2.3.4:5");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("peer 1.2.3.4:5 did not prove the job secret"),
              std::string::npos)
        << error.what();
  }
}

TEST(SecretHandshake, EmptySecretSendsNothing) {
  SocketPair pair;
  authenticateConnection(pair.client.get(), "", false, Clock::now() + 100ms, "peer");
  char byte;
  EXPECT_EQ(::recv(pair.server.get(), &byte, 1, MSG_DONTWAIT), -1);  // nothing arrived
}

TEST(SecretHandshake, SecretAgainstNoSecretTimesOutOnTheSideWithTheSecret) {
  SocketPair pair;
  const auto start = Clock::now();
  try {
    authenticateConnection(pair.server.get(), "s", true, Clock::now() + 200ms, "peer");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);
  }
  EXPECT_GE(Clock::now() - start, 190ms);
}

TEST(SecretHandshake, PeerClosingMidwayIsPeerLost) {
  SocketPair pair;
  pair.client.reset();
  try {
    authenticateConnection(pair.server.get(), "s", true, Clock::now() + 500ms, "peer");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kPeerLost);
  }
}

// An attacker without the secret echoes the server's challenge back as its own nonce, then
// returns the server's answer as its answer: the role binding must make that fail.
TEST(SecretHandshake, ReflectedAnswerFails) {
  SecretHandshake server("secret", /*is_server=*/true);
  std::string server_nonce = server.takeOutgoing();
  ASSERT_EQ(server_nonce.size(), SecretHandshake::kNonceSize);
  server.feed(reinterpret_cast<const uint8_t*>(server_nonce.data()), server_nonce.size());
  std::string server_answer = server.takeOutgoing();
  ASSERT_EQ(server_answer.size(), SecretHandshake::kAnswerSize);
  EXPECT_EQ(server.bytesWanted(), SecretHandshake::kAnswerSize);
  server.feed(reinterpret_cast<const uint8_t*>(server_answer.data()), server_answer.size());
  EXPECT_EQ(server.state(), SecretHandshake::State::kFailed);
}

TEST(SecretHandshake, StateMachinesAgreeAndConsumeOnlyTheirBytes) {
  SecretHandshake server("k", true), client("k", false);
  std::string to_client = server.takeOutgoing(), to_server = client.takeOutgoing();
  EXPECT_NE(to_client, to_server);  // fresh random nonces
  client.feed(reinterpret_cast<const uint8_t*>(to_client.data()), to_client.size());
  server.feed(reinterpret_cast<const uint8_t*>(to_server.data()), to_server.size());
  to_client = server.takeOutgoing() + "extra";
  to_server = client.takeOutgoing();
  EXPECT_EQ(client.feed(reinterpret_cast<const uint8_t*>(to_client.data()), to_client.size()),
            SecretHandshake::kAnswerSize);
  server.feed(reinterpret_cast<const uint8_t*>(to_server.data()), to_server.size());
  EXPECT_EQ(client.state(), SecretHandshake::State::kPassed);
  EXPECT_EQ(server.state(), SecretHandshake::State::kPassed);
  EXPECT_EQ(client.bytesWanted(), 0u);
}

}  // namespace
}  // namespace ronde
