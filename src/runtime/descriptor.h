// What one rank announces about one request during negotiation, and how ranks' announcements
// are compared. The wire form is compact: only the fields the kind of request uses travel.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ronde/runtime.h"

namespace ronde::runtime {

// Kinds that only the runtime issues, beyond the public RequestKind values.
constexpr uint8_t kAddProcessSetKind = 64;
constexpr uint8_t kRemoveProcessSetKind = 65;

const char* kindName(uint8_t kind);

struct Descriptor {
  std::string name;
  int32_t process_set = 0;
  uint8_t kind = 0;  // RequestKind or one of the internal kinds above
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall rows per rank; process-set add: the ranks
  Device device;
  std::string group;  // grouped requests: the group's first name; empty otherwise
  int32_t group_size = 0;
  // A refusal notice: the rank refused this request because its name was already in flight
  // there. It holds the rank's place in the next request of that name, so that the ranks
  // that did accept theirs fail too instead of waiting, until the rank submits the name again
  // itself (travels as the kind byte's top bit).
  bool refused = false;

  bool operator==(const Descriptor&) const = default;
  int64_t numel() const;
  // Elements per first-dimension row (1 for a scalar).
  int64_t rowElements() const;
};

// Little-endian byte buffers for the negotiation messages.
class WireWriter {
 public:
  void u8(uint8_t v) { bytes_.push_back(v); }
  void i32(int32_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void f64(double v) { raw(&v, sizeof v); }
  void str(const std::string& s);
  void i64s(const std::vector<int64_t>& v);
  void descriptor(const Descriptor& d);
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  void raw(const void* p, size_t n);
  std::vector<uint8_t> bytes_;
};

// Reads what WireWriter wrote. A malformed message (truncated, a length past its end, an
// unknown enum value) throws Error(kInternal) naming what was wrong, before allocating.
class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t u8();
  int32_t i32();
  int64_t i64();
  double f64();
  std::string str();
  std::vector<int64_t> i64s();
  Descriptor descriptor();
  bool done() const { return p_ == end_; }

 private:
  void raw(void* out, size_t n);
  size_t remaining() const;
  // A length prefix, checked against the bytes left for elements of `element_size` bytes.
  size_t length(const char* what, size_t element_size);
  const uint8_t* p_;
  const uint8_t* end_;
};

// Compares the announcements of the ranks that submitted one request (indexed by world rank,
// empty for ranks that did not). Returns "" when they agree, else a message naming the tensor,
// the differing field, and which ranks hold which value.
std::string findMismatch(const std::vector<std::optional<Descriptor>>& per_rank);

std::string formatShape(const std::vector<int64_t>& shape);

// The tensor a request is for. Horovod's frontends scope a user's name by kind
// ("allreduce.grad"); that prefix is dropped, so that "allreduce.grad" and "allgather.grad"
// are one tensor, which one rank may have in flight once and all ranks must agree on.
// Automatic names ("allreduce.noname.3", numbered per kind) keep the prefix: the user chose
// nothing that could clash.
std::string tensorName(const std::string& name, uint8_t kind);

}  // namespace ronde::runtime
