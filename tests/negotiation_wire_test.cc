// The negotiation reader against malformed messages: every fault is a ronde Error(kInternal)
// naming what was wrong, found before anything is allocated for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/descriptor.h"

namespace {

// The largest single allocation since the last reset, seen through the replaced operator new
// (it serves libronde too, whose calls resolve to the executable's definition).
std::atomic<size_t> g_largest_allocation{0};

}  // namespace

// The pair below replaces the global allocator; GCC cannot tell that delete meets only
// pointers from this new.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t size) {
  size_t seen = g_largest_allocation.load();
  while (size > seen && !g_largest_allocation.compare_exchange_weak(seen, size)) {
  }
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace ronde::runtime {
namespace {

// Bytes written by hand, not by WireWriter, so the test does not share the writer's view.
struct Bytes {
  std::vector<uint8_t> data;
  Bytes& i32(int32_t v) { return raw(&v, sizeof v); }
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& zeros(size_t n) {
    data.insert(data.end(), n, 0);
    return *this;
  }
  Bytes& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    data.insert(data.end(), b, b + n);
    return *this;
  }
};

// A descriptor's fields up to its shape: empty name, set 0, allreduce float32 sum on cpu:-1.
Bytes upToShape() {
  Bytes b;
  b.i32(0).i32(0).u8(0).u8(7).u8(0).u8(0).i32(-1);
  double one = 1.0;
  b.raw(&one, 8).raw(&one, 8).i32(0);
  return b;
}

// Decodes `bytes` as a descriptor; returns the Error's message, failing on any other outcome.
std::string decodeError(const Bytes& bytes) {
  g_largest_allocation = 0;
  WireReader reader(bytes.data.data(), bytes.data.size());
  try {
    reader.descriptor();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal) << e.what();
    EXPECT_LT(g_largest_allocation.load(), size_t{4096}) << "allocated for a bad length";
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ronde::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "a malformed message decoded";
  return "";
}

void expectContains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' missing in: " << text;
}

TEST(NegotiationWire, NegativeStringLengthIsAnErrorNamingIt) {
  std::string m = decodeError(Bytes().i32(-5).zeros(16));
  expectContains(m, "malformed negotiation message");
  expectContains(m, "string length -5 is negative");
}

TEST(NegotiationWire, StringLengthPastTheEndAllocatesNothing) {
  // 20 bytes claiming an 80 MB name.
  std::string m = decodeError(Bytes().i32(80'000'000).zeros(16));
  expectContains(m, "string length 80000000 exceeds the 16 bytes left");
}

TEST(NegotiationWire, IntegerListLengthsAreCheckedAgainstTheBytesLeft) {
  // 10 elements need 80 bytes; 79 are there.
  std::string m = decodeError(upToShape().i32(10).zeros(79));
  expectContains(m, "integer list length 10 exceeds the 79 bytes left");
  m = decodeError(upToShape().i32(-1).zeros(8));
  expectContains(m, "integer list length -1 is negative");
  m = decodeError(upToShape().i32(1'000'000'000));
  expectContains(m, "integer list length 1000000000 exceeds the 0 bytes left");
}

TEST(NegotiationWire, UnknownEnumValuesAndNegativeDimensionsAreRejected) {
  Bytes kind;
  kind.i32(0).i32(0).u8(99);
  expectContains(decodeError(kind), "unknown request kind 99");
  Bytes dtype;
  dtype.i32(0).i32(0).u8(0).u8(200);
  expectContains(decodeError(dtype), "unknown dtype 200");
  Bytes op;
  op.i32(0).i32(0).u8(0).u8(7).u8(9);
  expectContains(decodeError(op), "unknown reduce op 9");
  Bytes device;
  device.i32(0).i32(0).u8(0).u8(7).u8(0).u8(5);
  expectContains(decodeError(device), "unknown device kind 5");
  int64_t minus_three = -3;
  expectContains(decodeError(upToShape().i32(1).raw(&minus_three, 8).i32(0)),
                 "negative dimension -3");
}

TEST(NegotiationWire, TruncatedFieldsAreErrorsAndAWellFormedOneStillDecodes) {
  Bytes whole = upToShape();
  int64_t dim = 6;
  whole.i32(1).raw(&dim, 8).i32(0).i32(0).i32(0);  // shape [6], no splits, no group
  for (size_t cut = 0; cut < whole.data.size(); ++cut) {
    Bytes part;
    part.data.assign(whole.data.begin(), whole.data.begin() + static_cast<ptrdiff_t>(cut));
    expectContains(decodeError(part), "malformed negotiation message");
  }
  WireReader reader(whole.data.data(), whole.data.size());
  Descriptor d = reader.descriptor();
  EXPECT_TRUE(reader.done());
  EXPECT_EQ(d.shape, std::vector<int64_t>{6});
  EXPECT_EQ(d.dtype, DataType::kFloat32);
  EXPECT_EQ(d.kind, static_cast<uint8_t>(RequestKind::kAllreduce));
}

}  // namespace
}  // namespace ronde::runtime
