// Mutual proof of the job secret on a freshly connected socket, used by the rendezvous store
// and by ronde's data connections, so a stray process on the network can neither join a job
// nor impersonate its server.
//
// Protocol (both sides at once, 64 bytes each way): send a random 32-byte nonce; on the
// peer's nonce, send HMAC-SHA256(secret, own role || peer nonce); check the peer's answer
// against HMAC-SHA256(secret, peer role || own nonce). Binding the role into the answer makes
// a reflected answer (the peer echoing our own challenge back to us) fail.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ronde {

// Both ends call this right after connect/accept, on a blocking or non-blocking socket.
// With an empty secret it returns at once without sending anything (both sides must agree
// on emptiness; an empty-vs-set mismatch fails on the side that has the secret).
// Throws Error(kAuth, "... <peer_description> did not prove the job secret") on a wrong
// answer, Error(kTimeout) past the deadline, Error(kPeerLost) if the peer closes mid-way.
// Reads exactly the handshake's bytes, so protocol data sent right after it stays unread.
void authenticateConnection(int fd, const std::string& secret, bool is_server,
                            std::chrono::steady_clock::time_point deadline,
                            const std::string& peer_description);

// The same handshake as a state machine, for event loops that must not block on one peer
// (the store server runs it inside its poll loop). Not thread-safe; one per connection.
class SecretHandshake {
 public:
  static constexpr size_t kNonceSize = 32;
  static constexpr size_t kAnswerSize = 32;

  enum class State { kRunning, kPassed, kFailed };

  // Draws the nonce from the kernel's random source; the nonce is the first outgoing data.
  SecretHandshake(std::string secret, bool is_server);

  // Bytes to send now (may be empty); call after construction and after every feed().
  std::string takeOutgoing();
  // Bytes still expected from the peer; never read more, the rest belongs to the protocol.
  size_t bytesWanted() const;
  // Consumes at most bytesWanted() bytes of `data`; returns how many it took.
  size_t feed(const uint8_t* data, size_t size);
  State state() const { return state_; }

 private:
  std::string secret_;
  bool is_server_;
  std::string own_nonce_;
  std::string received_;  // the peer's nonce, then its answer
  std::string outgoing_;
  State state_ = State::kRunning;
};

// Fills `size` bytes from the kernel's random source (getrandom). Throws Error(kIo).
std::string randomBytes(size_t size);

}  // namespace ronde
