// Wire format of the TCP store, shared by server and client. Every message is one fixed
// header plus byte strings, little-endian, so both sides can frame it without a parser state:
//
//   request:  u8 op | u32 key_size | u32 value_size | u64 argument | key | value
//   response: u8 status | u32 payload_size | payload
//
// `argument` is the GET timeout in milliseconds or the ADD delta (two's complement).
// The payload is the value (GET, TRYGET), the new counter as 8 bytes (ADD), or an error text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ronde::tcp_store {

enum class Op : uint8_t { kSet = 1, kGet = 2, kTryGet = 3, kAdd = 4, kErase = 5 };
enum class Status : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kError = 3 };

constexpr size_t kRequestHeaderSize = 1 + 4 + 4 + 8;
constexpr size_t kResponseHeaderSize = 1 + 4;
// Bounds that no honest peer reaches; a frame beyond them means a confused or hostile peer.
constexpr uint32_t kMaxKeySize = 64 * 1024;
constexpr uint32_t kMaxValueSize = 1024 * 1024 * 1024;

struct Request {
  Op op;
  uint64_t argument = 0;
  std::string key;
  std::string value;
};

inline void putLittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(char(uint8_t(value >> (8 * i))));
}

inline uint64_t getLittleEndian(const char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t(uint8_t(in[i])) << (8 * i);
  return value;
}

inline std::string encodeRequest(Op op, const std::string& key, const std::string& value,
                                 uint64_t argument) {
  std::string out;
  out.reserve(kRequestHeaderSize + key.size() + value.size());
  out.push_back(char(op));
  putLittleEndian(&out, key.size(), 4);
  putLittleEndian(&out, value.size(), 4);
  putLittleEndian(&out, argument, 8);
  out += key;
  out += value;
  return out;
}

enum class ParseResult { kIncomplete, kRequest, kMalformed };

// Takes one request from the front of `buffer` (starting at `*offset`) if it is complete.
inline ParseResult parseRequest(const std::string& buffer, size_t* offset, Request* request) {
  const size_t available = buffer.size() - *offset;
  if (available < kRequestHeaderSize) return ParseResult::kIncomplete;
  const char* header = buffer.data() + *offset;
  const uint8_t op = uint8_t(header[0]);
  const uint64_t key_size = getLittleEndian(header + 1, 4);
  const uint64_t value_size = getLittleEndian(header + 5, 4);
  if (op < uint8_t(Op::kSet) || op > uint8_t(Op::kErase) || key_size > kMaxKeySize ||
      value_size > kMaxValueSize) {
    return ParseResult::kMalformed;
  }
  if (available < kRequestHeaderSize + key_size + value_size) return ParseResult::kIncomplete;
  request->op = Op(op);
  request->argument = getLittleEndian(header + 9, 8);
  request->key.assign(header + kRequestHeaderSize, key_size);
  request->value.assign(header + kRequestHeaderSize + key_size, value_size);
  *offset += kRequestHeaderSize + key_size + value_size;
  return ParseResult::kRequest;
}

inline std::string encodeResponse(Status status, const std::string& payload) {
  std::string out;
  out.reserve(kResponseHeaderSize + payload.size());
  out.push_back(char(status));
  putLittleEndian(&out, payload.size(), 4);
  out += payload;
  return out;
}

}  // namespace ronde::tcp_store
