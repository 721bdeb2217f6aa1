// Fuzzes the TCP store's request framing the way the server's poll loop uses it: a byte
// stream that arrives in pieces, parsed request after request. Whatever parses must encode
// back to the bytes it came from; a request never reads past what arrived.
#include <cstddef>
#include <cstdint>
#include <string>

#include "rendezvous/tcp_store_protocol.h"

namespace tcp_store = ronde::tcp_store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks how many bytes arrive per read, as a socket would split them.
  const size_t piece = 1 + data[0] % 64;
  const std::string stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string input;
  size_t offset = 0;
  for (size_t arrived = 0; arrived < stream.size();) {
    size_t n = std::min(piece, stream.size() - arrived);
    input.append(stream, arrived, n);
    arrived += n;
    for (;;) {
      size_t before = offset;
      tcp_store::Request request;
      auto result = tcp_store::parseRequest(input, &offset, &request);
      if (result == tcp_store::ParseResult::kMalformed) return 0;  // the server drops the peer
      if (result == tcp_store::ParseResult::kIncomplete) {
        if (offset != before) __builtin_trap();
        break;
      }
      if (offset > input.size()) __builtin_trap();
      std::string again =
          tcp_store::encodeRequest(request.op, request.key, request.value, request.argument);
      if (again != input.substr(before, offset - before)) __builtin_trap();
    }
  }
  return 0;
}
