#include "common/secret_handshake.h"

#include <poll.h>
#include <sys/random.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <utility>

#include "common/sha256.h"
#include "common/socket.h"
#include "ronde/errors.h"

namespace ronde {
namespace {

// Distinct labels per role: the answer a server gives is never a valid client answer.
constexpr std::string_view kServerRole = "ronde-auth-v1 server";
constexpr std::string_view kClientRole = "ronde-auth-v1 client";

std::string answerFor(const std::string& secret, std::string_view role,
                      const std::string& nonce) {
  std::string message(role);
  message += nonce;
  Sha256Digest digest = hmacSha256(secret, message);
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

// Constant-time so response timing tells an attacker nothing about how much was right.
bool sameBytes(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  uint8_t difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= uint8_t(a[i] ^ b[i]);
  return difference == 0;
}

// Errors and hang-ups surface in the send/recv that follows the wait.
void waitOrTimeOut(int fd, short events, Deadline deadline, const std::string& peer_description) {
  if (!waitReady(fd, events, deadline)) {
    throw makeError(ErrorCode::kTimeout, "job-secret handshake with ", peer_description,
                    " timed out");
  }
}

}  // namespace

std::string randomBytes(size_t size) {
  std::string bytes(size, '\0');
  size_t filled = 0;
  while (filled < size) {
    ssize_t got = ::getrandom(bytes.data() + filled, size - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw makeError(ErrorCode::kIo, "getrandom: ", std::strerror(errno));
    }
    filled += size_t(got);
  }
  return bytes;
}

SecretHandshake::SecretHandshake(std::string secret, bool is_server)
    : secret_(std::move(secret)), is_server_(is_server), own_nonce_(randomBytes(kNonceSize)) {
  outgoing_ = own_nonce_;
}

std::string SecretHandshake::takeOutgoing() { return std::exchange(outgoing_, std::string()); }

size_t SecretHandshake::bytesWanted() const {
  if (state_ != State::kRunning) return 0;
  return kNonceSize + kAnswerSize - received_.size();
}

size_t SecretHandshake::feed(const uint8_t* data, size_t size) {
  size_t take = std::min(size, bytesWanted());
  const bool had_nonce = received_.size() >= kNonceSize;
  received_.append(reinterpret_cast<const char*>(data), take);
  if (!had_nonce && received_.size() >= kNonceSize) {
    outgoing_ += answerFor(secret_, is_server_ ? kServerRole : kClientRole,
                           received_.substr(0, kNonceSize));
  }
  if (received_.size() == kNonceSize + kAnswerSize) {
    std::string expected = answerFor(secret_, is_server_ ? kClientRole : kServerRole, own_nonce_);
    state_ = sameBytes(received_.substr(kNonceSize), expected) ? State::kPassed : State::kFailed;
  }
  return take;
}

void authenticateConnection(int fd, const std::string& secret, bool is_server,
                            std::chrono::steady_clock::time_point deadline,
                            const std::string& peer_description) {
  if (secret.empty()) return;
  const Deadline until(deadline);
  SecretHandshake handshake(secret, is_server);
  std::string pending;
  for (;;) {
    pending += handshake.takeOutgoing();
    while (!pending.empty()) {
      waitOrTimeOut(fd, POLLOUT, until, peer_description);
      SocketIo io = sendSome(fd, pending.data(), pending.size());
      if (io.error != 0) {
        throw makeError(ErrorCode::kPeerLost, "job-secret handshake with ", peer_description,
                        ": send: ", std::strerror(io.error));
      }
      pending.erase(0, io.bytes);
    }
    if (handshake.state() == SecretHandshake::State::kPassed) return;
    if (handshake.state() == SecretHandshake::State::kFailed) {
      throw makeError(ErrorCode::kAuth, "connection refused: ", peer_description,
                      " did not prove the job secret");
    }
    uint8_t buffer[SecretHandshake::kNonceSize + SecretHandshake::kAnswerSize];
    waitOrTimeOut(fd, POLLIN, until, peer_description);
    SocketIo io = recvSome(fd, buffer, handshake.bytesWanted());
    if (io.closed) {
      throw makeError(ErrorCode::kPeerLost, peer_description,
                      " closed the connection during the job-secret handshake");
    }
    if (io.error != 0) {
      throw makeError(ErrorCode::kPeerLost, "job-secret handshake with ", peer_description,
                      ": recv: ", std::strerror(io.error));
    }
    handshake.feed(buffer, io.bytes);
  }
}

}  // namespace ronde
