// Fuzzes the secret handshake's state machine with whatever a peer might send, in pieces of
// any size: it never takes more than it asked for, never passes a peer that cannot know the
// secret, and stays failed once failed.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/secret_handshake.h"

using ronde::SecretHandshake;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool is_server = data[0] & 1;
  const size_t piece = 1 + data[1] % 40;
  data += 2;
  size -= 2;
  SecretHandshake handshake("the job secret", is_server);
  handshake.takeOutgoing();
  size_t at = 0;
  while (at < size && handshake.state() == SecretHandshake::State::kRunning) {
    size_t wanted = handshake.bytesWanted();
    size_t offered = std::min(piece, size - at);
    size_t taken = handshake.feed(data + at, offered);
    if (taken > wanted || taken > offered) __builtin_trap();
    if (taken == 0 && handshake.state() == SecretHandshake::State::kRunning) __builtin_trap();
    at += taken;
    handshake.takeOutgoing();
  }
  // The answer is an HMAC over this run's fresh random nonce: no input can know it.
  if (handshake.state() == SecretHandshake::State::kPassed) __builtin_trap();
  if (handshake.state() == SecretHandshake::State::kFailed) {
    if (handshake.bytesWanted() != 0 && handshake.feed(data, size) != 0) __builtin_trap();
  }
  return 0;
}
