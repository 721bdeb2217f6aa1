// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), written here so ronde needs no crypto
// library just to prove a job secret. Not hardened against side channels beyond what the
// handshake needs (its comparison is constant-time; see secret_handshake.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ronde {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hashing: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  Sha256Digest finish();

 private:
  void compressBlock(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(std::string_view data);
Sha256Digest hmacSha256(std::string_view key, std::string_view message);

// Lower-case hex, for tests and for turning long keys into file names.
std::string toHex(const Sha256Digest& digest);

}  // namespace ronde
