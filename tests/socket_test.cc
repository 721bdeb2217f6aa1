// The one socket helper (src/common/socket.h, net_address.h) against what the kernel does:
// bytes arrive whole and in order through full socket buffers, a peer that listens late is
// still reached, and every failure is the right ErrorCode with the peer's name in it.
#include "common/socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/net_address.h"
#include "ronde/errors.h"

namespace ronde {
namespace {

using namespace std::chrono_literals;

int freePort() {
  UniqueFd listener = listenTcp("127.0.0.1", 0, 1);
  return boundPort(listener.get());
}

// Runs `body` and returns the Error it throws; fails the test when it throws nothing.
template <typename Body>
Error errorOf(Body body) {
  try {
    body();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "no error thrown";
  return Error(ErrorCode::kInternal, "");
}

bool mentions(const Error& error, const std::string& text) {
  return std::string(error.what()).find(text) != std::string::npos;
}

struct ConnectedPair {
  UniqueFd client;
  UniqueFd server;
  std::string client_seen_by_server;
};

ConnectedPair connectPair() {
  UniqueFd listener = listenTcp("127.0.0.1", 0, 4);
  const int port = boundPort(listener.get());
  ConnectedPair pair;
  pair.client = connectTcp("127.0.0.1", port, Deadline::after(5s), "test peer");
  pair.server = acceptWithin(listener.get(), Deadline::after(5s), "test listener",
                             &pair.client_seen_by_server);
  return pair;
}

TEST(Socket, FullTransfersCarryMoreThanTheSocketBuffersInOrder) {
  ConnectedPair pair = connectPair();
  // Far more than the kernel buffers hold, so both sides must wait for room and data.
  std::vector<uint32_t> sent(8 << 20 >> 2);
  std::iota(sent.begin(), sent.end(), 7u);
  std::vector<uint32_t> received(sent.size());
  std::thread sender([&] {
    sendFully(pair.client.get(), sent.data(), sent.size() * 4, Deadline::after(30s), "receiver");
  });
  recvFully(pair.server.get(), received.data(), received.size() * 4, Deadline::after(30s),
            "sender");
  sender.join();
  EXPECT_EQ(received, sent);
}

TEST(Socket, AcceptNamesThePeerByTheClientsOwnAddress) {
  ConnectedPair pair = connectPair();
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  ASSERT_EQ(::getsockname(pair.client.get(), reinterpret_cast<sockaddr*>(&local), &length), 0);
  const int client_port = ntohs(reinterpret_cast<sockaddr_in&>(local).sin_port);
  EXPECT_EQ(pair.client_seen_by_server, "127.0.0.1:" + std::to_string(client_port));
}

TEST(Socket, ConnectWaitsForAPeerThatListensLate) {
  const int port = freePort();
  std::thread late([port] {
    std::this_thread::sleep_for(300ms);
    UniqueFd listener = listenTcp("127.0.0.1", port, 1);
    UniqueFd accepted = acceptWithin(listener.get(), Deadline::after(10s), "late peer", nullptr);
    const char byte = 'x';
    sendFully(accepted.get(), &byte, 1, Deadline::after(10s), "client");
  });
  UniqueFd fd = connectTcp("127.0.0.1", port, Deadline::after(10s), "late peer");
  char byte = 0;
  recvFully(fd.get(), &byte, 1, Deadline::after(10s), "late peer");
  late.join();
  EXPECT_EQ(byte, 'x');
}

TEST(Socket, ConnectGivesUpAtTheDeadlineNamingThePeerAndWhy) {
  const int port = freePort();
  Error error = errorOf([&] { connectTcp("127.0.0.1", port, Deadline::after(200ms), "rank 3"); });
  EXPECT_EQ(error.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(mentions(error, "could not connect to rank 3")) << error.what();
  EXPECT_TRUE(mentions(error, "refused")) << error.what();
}

TEST(Socket, AnUnresolvableHostSaysSo) {
  Error error =
      errorOf([&] { connectTcp("no-such-host.invalid", 1, Deadline::after(100ms), "the store"); });
  EXPECT_EQ(error.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(mentions(error, "cannot resolve host 'no-such-host.invalid'")) << error.what();
}

TEST(Socket, ClosedPeerIsPeerLostAndSilentPeerIsTimeout) {
  ConnectedPair pair = connectPair();
  char buffer[4];
  Error silent = errorOf(
      [&] { recvFully(pair.server.get(), buffer, 4, Deadline::after(100ms), "rank 1 (host b)"); });
  EXPECT_EQ(silent.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(mentions(silent, "timed out receiving from rank 1 (host b)")) << silent.what();

  const char two[2] = {1, 2};
  sendFully(pair.client.get(), two, 2, Deadline::after(5s), "server");
  pair.client.reset();
  Error closed = errorOf(
      [&] { recvFully(pair.server.get(), buffer, 4, Deadline::after(5s), "rank 1 (host b)"); });
  EXPECT_EQ(closed.code(), ErrorCode::kPeerLost);
  EXPECT_TRUE(mentions(closed, "rank 1 (host b) closed the connection")) << closed.what();
}

TEST(Socket, SendToAClosedPeerIsPeerLostNotSigpipe) {
  ConnectedPair pair = connectPair();
  pair.server.reset();
  std::vector<char> data(1 << 20, 'a');
  Error error = errorOf([&] {
    for (int i = 0; i < 64; ++i) {
      sendFully(pair.client.get(), data.data(), data.size(), Deadline::after(5s), "rank 2");
    }
  });
  EXPECT_EQ(error.code(), ErrorCode::kPeerLost);
  EXPECT_TRUE(mentions(error, "lost connection to rank 2")) << error.what();
}

TEST(Socket, AcceptNowReturnsEmptyWhenNobodyWaitsAndAcceptWithinTimesOut) {
  UniqueFd listener = listenTcp("127.0.0.1", 0, 1);
  int error = -1;
  std::string peer;
  EXPECT_FALSE(acceptNow(listener.get(), &peer, &error));
  EXPECT_EQ(error, 0);
  Error timeout = errorOf(
      [&] { acceptWithin(listener.get(), Deadline::after(100ms), "rank 0's listener", &peer); });
  EXPECT_EQ(timeout.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(mentions(timeout, "rank 0's listener")) << timeout.what();
}

TEST(Socket, NonBlockingIoReportsWouldBlockAndHangUp) {
  ConnectedPair pair = connectPair();
  char byte = 0;
  SocketIo nothing = recvSome(pair.server.get(), &byte, 1);
  EXPECT_EQ(nothing.bytes, 0u);
  EXPECT_FALSE(nothing.closed);
  EXPECT_EQ(nothing.error, 0);
  EXPECT_EQ(sendSome(pair.client.get(), "z", 1).bytes, 1u);
  ASSERT_TRUE(waitReady(pair.server.get(), POLLIN, Deadline::after(5s)));
  EXPECT_EQ(recvSome(pair.server.get(), &byte, 1).bytes, 1u);
  EXPECT_EQ(byte, 'z');
  pair.client.reset();
  ASSERT_TRUE(waitReady(pair.server.get(), POLLIN, Deadline::after(5s)));
  EXPECT_TRUE(recvSome(pair.server.get(), &byte, 1).closed);
}

TEST(Socket, ListeningTwiceOnOnePortNamesTheAddress) {
  UniqueFd first = listenTcp("127.0.0.1", 0, 1);
  const int port = boundPort(first.get());
  // SO_REUSEADDR does not let two sockets listen on one port at once.
  Error error = errorOf([&] { listenTcp("127.0.0.1", port, 1); });
  EXPECT_EQ(error.code(), ErrorCode::kIo);
  EXPECT_TRUE(mentions(error, "cannot listen on '127.0.0.1' port " + std::to_string(port)))
      << error.what();
}

TEST(Socket, Ipv6LoopbackWorksWhereTheHostHasIt) {
  UniqueFd listener;
  try {
    listener = listenTcp("::1", 0, 1);
  } catch (const Error&) {
    GTEST_SKIP() << "no IPv6 loopback here";
  }
  UniqueFd client = connectTcp("::1", boundPort(listener.get()), Deadline::after(5s), "v6 peer");
  std::string peer;
  UniqueFd accepted = acceptWithin(listener.get(), Deadline::after(5s), "v6 listener", &peer);
  EXPECT_EQ(peer.rfind("[::1]:", 0), 0u) << peer;
}

TEST(NetAddress, SplitsHostAndPortAndRejectsMalformedOnes) {
  std::string host;
  int port = 0;
  splitHostPort("10.0.0.2:29500", &host, &port);
  EXPECT_EQ(host, "10.0.0.2");
  EXPECT_EQ(port, 29500);
  for (const char* bad : {"10.0.0.2", ":1", "h:", "h:0", "h:65536", "h:12x"}) {
    EXPECT_EQ(errorOf([&] { splitHostPort(bad, &host, &port); }).code(), ErrorCode::kConfig) << bad;
  }
}

TEST(NetAddress, LocalAddressesAgreeWithTheInterfaces) {
  EXPECT_EQ(resolveLocalAddress("10.1.2.3"), "10.1.2.3");  // an address is taken as given
  EXPECT_EQ(localAddressToward("127.0.0.1", 9), "127.0.0.1");
  EXPECT_EQ(resolveIpv4("127.0.0.1"), std::vector<std::string>{"127.0.0.1"});
  EXPECT_TRUE(resolveIpv4("no-such-host.invalid").empty());
  bool loopback_named = false;
  for (const InterfaceAddress& entry : interfaceAddresses()) {
    if (entry.loopback) {
      loopback_named = true;
      EXPECT_EQ(resolveLocalAddress(entry.interface), entry.address);
    }
  }
  EXPECT_TRUE(loopback_named);
  Error error = errorOf([] { resolveLocalAddress("nosuchif0"); });
  EXPECT_EQ(error.code(), ErrorCode::kConfig);
  EXPECT_TRUE(mentions(error, "nosuchif0")) << error.what();
}

}  // namespace
}  // namespace ronde
