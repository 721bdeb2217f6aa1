// Fuzzes the negotiation reader with whole per-rank messages, as exchangeAnnouncements reads
// them: flags, rank 0's knobs, a count, descriptors. A malformed message may only throw
// ronde::Error; whatever decodes must encode back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/descriptor.h"

using ronde::runtime::Descriptor;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ronde::runtime::WireReader reader(data, size);
  std::vector<Descriptor> decoded;
  try {
    uint8_t flags = reader.u8();
    if (flags & 0x80) {  // as from rank 0: the knobs
      reader.i64();
      reader.f64();
    }
    int32_t n = reader.i32();
    for (int32_t i = 0; i < n; ++i) decoded.push_back(reader.descriptor());
  } catch (const ronde::Error&) {
    // Malformed: the one allowed way to refuse. Anything else escapes and is reported.
  }
  // Compared as bytes: a NaN scale factor (never sent by a rank, but decodable) is unequal
  // to itself as a double.
  ronde::runtime::WireWriter writer;
  for (const Descriptor& d : decoded) writer.descriptor(d);
  ronde::runtime::WireReader again(writer.bytes().data(), writer.bytes().size());
  ronde::runtime::WireWriter rewritten;
  std::vector<std::optional<Descriptor>> per_rank;
  for (size_t i = 0; i < decoded.size(); ++i) {
    rewritten.descriptor(again.descriptor());
    per_rank.emplace_back(decoded[i]);
  }
  if (!again.done() || rewritten.bytes() != writer.bytes()) __builtin_trap();
  ronde::runtime::findMismatch(per_rank);  // the messages of what decoded must not fault
  return 0;
}
