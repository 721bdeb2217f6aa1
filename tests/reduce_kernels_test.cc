// The reduction kernels against a plain scalar reference written here, on every instruction
// set this CPU runs. The reference reduces 16-bit floats in double and rounds them with
// support/half_reference.h, which shares no conversion code with the library.
#include "common/reduce_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "ronde/errors.h"
#include "support/half_reference.h"

namespace ronde {
namespace {

using namespace ronde::testing;

// ---- Reference reductions.


// One element, widened to double (floats), or to a wrapping 64-bit integer.
struct Value {
  double f = 0;
  uint64_t i = 0;
};

template <class T>
T readAs(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

Value readValue(DataType t, const unsigned char* p) {
  Value v;
  switch (t) {
    case DataType::kUInt8: v.i = readAs<uint8_t>(p); break;
    case DataType::kInt8: v.i = static_cast<uint64_t>(readAs<int8_t>(p)); break;
    case DataType::kInt16: v.i = static_cast<uint64_t>(readAs<int16_t>(p)); break;
    case DataType::kUInt16: v.i = readAs<uint16_t>(p); break;
    case DataType::kInt32: v.i = static_cast<uint64_t>(readAs<int32_t>(p)); break;
    case DataType::kInt64: v.i = static_cast<uint64_t>(readAs<int64_t>(p)); break;
    case DataType::kBool: v.i = readAs<uint8_t>(p) != 0; break;
    case DataType::kFloat16: v.f = decodeHalf(readAs<uint16_t>(p)); break;
    case DataType::kBFloat16: v.f = decodeBfloat16(readAs<uint16_t>(p)); break;
    case DataType::kFloat32: v.f = readAs<float>(p); break;
    case DataType::kFloat64: v.f = readAs<double>(p); break;
  }
  return v;
}

int64_t signedValue(DataType t, uint64_t wrapped) {
  switch (t) {
    case DataType::kUInt8: return static_cast<uint8_t>(wrapped);
    case DataType::kInt8: return static_cast<int8_t>(wrapped);
    case DataType::kInt16: return static_cast<int16_t>(wrapped);
    case DataType::kUInt16: return static_cast<uint16_t>(wrapped);
    case DataType::kInt32: return static_cast<int32_t>(wrapped);
    default: return static_cast<int64_t>(wrapped);
  }
}

// Expected output bytes for one element, plus the tolerance in value where rounding order
// makes the kernel's float32 arithmetic differ from this double-precision reference.
struct Expected {
  std::array<unsigned char, 8> bytes{};
  double value = 0;
  double tolerance = 0;
};

template <class T>
void putBytes(Expected& e, T v) {
  std::memcpy(e.bytes.data(), &v, sizeof(T));
}

double combineF(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return a < b ? b : a;
    case ReduceOp::kProduct: return a * b;
    default: return a + b;
  }
}

uint64_t combineI(DataType t, ReduceOp op, uint64_t a, uint64_t b) {
  switch (op) {
    case ReduceOp::kMin: return signedValue(t, b) < signedValue(t, a) ? b : a;
    case ReduceOp::kMax: return signedValue(t, a) < signedValue(t, b) ? b : a;
    case ReduceOp::kProduct: return a * b;
    default: return a + b;
  }
}

template <class F>
F combineSame(ReduceOp op, F a, F b) {
  switch (op) {
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return a < b ? b : a;
    case ReduceOp::kProduct: return a * b;
    default: return a + b;
  }
}

int64_t scaleReference(DataType t, int64_t v, double scale) {
  const double s = std::trunc(static_cast<double>(v) * scale);
  double lo = -0x1p63, hi = 0x1p63;
  switch (t) {
    case DataType::kUInt8: lo = 0; hi = 255; break;
    case DataType::kInt8: lo = -128; hi = 127; break;
    case DataType::kInt16: lo = -32768; hi = 32767; break;
    case DataType::kUInt16: lo = 0; hi = 65535; break;
    case DataType::kInt32: lo = -2147483648.0; hi = 2147483647.0; break;
    default: break;
  }
  if (s >= hi) return t == DataType::kInt64 ? std::numeric_limits<int64_t>::max()
                                            : static_cast<int64_t>(hi);
  if (s <= lo) return static_cast<int64_t>(lo);
  return static_cast<int64_t>(s);
}

Expected reference(DataType t, ReduceOp op, const std::vector<const unsigned char*>& srcs,
                   size_t i, double scale) {
  const size_t size = dataTypeSize(t);
  Expected e;
  const int n = static_cast<int>(srcs.size());
  if (t == DataType::kFloat32 || t == DataType::kFloat64) {
    // Same precision and order as the kernel: exact.
    if (t == DataType::kFloat32) {
      float acc = readAs<float>(srcs[0] + i * size);
      for (int k = 1; k < n; ++k) acc = combineSame(op, acc, readAs<float>(srcs[k] + i * size));
      if (scale != 1.0) acc *= static_cast<float>(scale);
      putBytes(e, acc);
    } else {
      double acc = readAs<double>(srcs[0] + i * size);
      for (int k = 1; k < n; ++k) acc = combineSame(op, acc, readAs<double>(srcs[k] + i * size));
      if (scale != 1.0) acc *= scale;
      putBytes(e, acc);
    }
    return e;
  }
  if (t == DataType::kFloat16 || t == DataType::kBFloat16) {
    double acc = readValue(t, srcs[0] + i * size).f;
    double magnitude = std::fabs(acc);
    for (int k = 1; k < n; ++k) {
      const double x = readValue(t, srcs[k] + i * size).f;
      acc = combineF(op, acc, x);
      magnitude = op == ReduceOp::kProduct ? std::fabs(acc) : magnitude + std::fabs(x);
    }
    acc *= scale;
    const uint16_t bits = t == DataType::kFloat16 ? roundHalf(acc) : roundBfloat16(acc);
    putBytes(e, bits);
    e.value = acc;
    // Exact when float32 computes the result exactly before the one rounding: min/max, and
    // two operands (float32 has 2p+2 bits of a 16-bit float's p). Otherwise allow the float32
    // error of the accumulation and the scale, plus one unit of the final rounding.
    const bool exact = (op == ReduceOp::kMin || op == ReduceOp::kMax || n <= 2) &&
                       (scale == 1.0 || scale == 0.25);
    if (!exact) {
      const double unit = t == DataType::kFloat16 ? 0x1p-10 : 0x1p-7;
      const double smallest = t == DataType::kFloat16 ? 0x1p-24 : 0x1p-133;
      e.tolerance = unit * std::fabs(acc) + smallest + 0x1p-21 * magnitude * std::fabs(scale);
    }
    return e;
  }
  if (t == DataType::kBool && n == 1 && scale == 1.0) {
    e.bytes[0] = srcs[0][i];  // a plain copy keeps any truthy byte
    return e;
  }
  if (t == DataType::kBool) {
    uint64_t acc = readValue(t, srcs[0] + i * size).i;
    const bool any = op == ReduceOp::kSum || op == ReduceOp::kMax;
    for (int k = 1; k < n; ++k) {
      const uint64_t x = readValue(t, srcs[k] + i * size).i;
      acc = any ? (acc | x) : (acc & x);
    }
    if (scale != 1.0) acc = std::trunc(static_cast<double>(acc) * scale) != 0;
    putBytes(e, static_cast<uint8_t>(acc));
    return e;
  }
  uint64_t acc = readValue(t, srcs[0] + i * size).i;
  for (int k = 1; k < n; ++k) acc = combineI(t, op, acc, readValue(t, srcs[k] + i * size).i);
  int64_t result = signedValue(t, acc);
  if (scale != 1.0) result = scaleReference(t, result, scale);
  std::memcpy(e.bytes.data(), &result, size);  // little-endian: the low bytes
  return e;
}

// Random contents: small-magnitude floats (no NaN, products stay finite), any integers,
// bools with several truthy byte values.
void fillRandom(DataType t, unsigned char* p, size_t count, std::mt19937& rng) {
  const size_t size = dataTypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    unsigned char* at = p + i * size;
    switch (t) {
      case DataType::kFloat16: {
        uint16_t h = static_cast<uint16_t>(rng() & 0x83ff) | ((rng() % 0x12) << 10);
        std::memcpy(at, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t b = static_cast<uint16_t>(rng() & 0x807f) | ((100 + rng() % 30) << 7);
        if (rng() % 64 == 0) b &= 0x807f;  // zero or subnormal
        std::memcpy(at, &b, 2);
        break;
      }
      case DataType::kFloat32: {
        const float f = std::ldexp(static_cast<float>(rng() % 2000001) - 1e6f, -16);
        std::memcpy(at, &f, 4);
        break;
      }
      case DataType::kFloat64: {
        const double d = std::ldexp(static_cast<double>(rng()) - 2147483648.0, -24);
        std::memcpy(at, &d, 8);
        break;
      }
      case DataType::kBool: {
        static const uint8_t kBytes[] = {0, 0, 1, 2, 255};
        *at = kBytes[rng() % 5];
        break;
      }
      default: {
        const uint64_t v = (static_cast<uint64_t>(rng()) << 32) | rng();
        std::memcpy(at, &v, size);
      }
    }
  }
}

void expectMatches(DataType t, const unsigned char* got, const Expected& e, size_t i,
                   const std::string& what) {
  const size_t size = dataTypeSize(t);
  if (t == DataType::kFloat32 || t == DataType::kFloat64) {
    const double g = t == DataType::kFloat32 ? readAs<float>(got) : readAs<double>(got);
    const double w = t == DataType::kFloat32 ? readAs<float>(e.bytes.data())
                                             : readAs<double>(e.bytes.data());
    ASSERT_TRUE(g == w || (std::isnan(g) && std::isnan(w))) << what << " at " << i << ": " << g
                                                            << " != " << w;
    return;
  }
  if ((t == DataType::kFloat16 || t == DataType::kBFloat16) && e.tolerance > 0) {
    const double g = readValue(t, got).f;
    if (std::isinf(e.value) || std::isinf(g)) {
      ASSERT_EQ(g, readValue(t, e.bytes.data()).f) << what << " at " << i;
    } else {
      ASSERT_NEAR(g, e.value, e.tolerance) << what << " at " << i;
    }
    return;
  }
  ASSERT_EQ(0, std::memcmp(got, e.bytes.data(), size))
      << what << " at " << i << ": got " << readValue(t, got).f << "/" << readValue(t, got).i
      << ", want " << readValue(t, e.bytes.data()).f << "/" << readValue(t, e.bytes.data()).i;
}

constexpr DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,     DataType::kInt16,
                                  DataType::kInt32,   DataType::kInt64,    DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBool,    DataType::kUInt16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                ReduceOp::kMax, ReduceOp::kProduct};

class ReduceKernelsTest : public ::testing::TestWithParam<KernelIsa> {
 protected:
  void SetUp() override {
    if (!kernelIsaSupported(GetParam())) GTEST_SKIP() << "CPU lacks " << kernelIsaName(GetParam());
    previous_ = activeKernelIsa();
    setKernelIsaForTesting(GetParam());
  }
  void TearDown() override {
    if (kernelIsaSupported(GetParam())) setKernelIsaForTesting(previous_);
  }
  KernelIsa previous_ = KernelIsa::kBaseline;
};

// Buffers start one element (and, for sources, a source-dependent number of elements) past
// a vector boundary, so no kernel sees aligned vectors.
struct Buffers {
  std::vector<std::vector<unsigned char>> storage;
  std::vector<const unsigned char*> srcs;
  std::vector<unsigned char> dst_storage;
  unsigned char* dst = nullptr;

  Buffers(DataType t, int num_srcs, size_t count, std::mt19937& rng) {
    const size_t size = dataTypeSize(t);
    storage.resize(num_srcs);
    for (int k = 0; k < num_srcs; ++k) {
      const size_t skew = (k % 3 + 1) * size;
      storage[k].resize(count * size + 64 + skew);
      unsigned char* base = alignUp(storage[k].data()) + skew;
      fillRandom(t, base, count, rng);
      srcs.push_back(base);
    }
    dst_storage.assign(count * size + 64 + size, 0xcd);
    dst = alignUp(dst_storage.data()) + size;
  }
  static unsigned char* alignUp(unsigned char* p) {
    const auto at = reinterpret_cast<uintptr_t>(p);
    return p + ((64 - at % 64) % 64);
  }
};

TEST_P(ReduceKernelsTest, ReduceManyMatchesReference) {
  std::mt19937 rng(1234);
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      if (t == DataType::kBool && op == ReduceOp::kAverage) continue;
      // 10007: hundreds of 128-byte blocks and an odd tail; the kernels have no other size
      // threshold, so larger counts only cost time (100003 took 7 s per ISA, 14 s under ASan).
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{10007}}) {
        for (int n : {1, 2, 3, 4, 5, 8}) {
          for (double scale : {1.0, 0.25, 1.0 / 3, -2.5}) {
            if (count > 1000 && (n > 4 || (scale != 1.0 && scale != 0.25))) continue;
            const std::string what = std::string(dataTypeName(t)) + " " + reduceOpName(op) +
                                     " count=" + std::to_string(count) + " srcs=" +
                                     std::to_string(n) + " scale=" + std::to_string(scale);
            Buffers b(t, n, count, rng);
            std::vector<const void*> srcs(b.srcs.begin(), b.srcs.end());
            reduceMany(b.dst, srcs.data(), n, count, t, op, scale);
            const size_t size = dataTypeSize(t);
            for (size_t i = 0; i < count; ++i) {
              expectMatches(t, b.dst + i * size, reference(t, op, b.srcs, i, scale), i, what);
              if (HasFatalFailure()) return;
            }
            // Nothing written past the end.
            ASSERT_EQ(b.dst[count * size], 0xcd) << what;
          }
        }
      }
    }
  }
}

TEST_P(ReduceKernelsTest, ReduceIntoAndAliasedDestination) {
  std::mt19937 rng(99);
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      if (t == DataType::kBool && op == ReduceOp::kAverage) continue;
      for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{4099}}) {
        for (int n : {2, 3, 5}) {
          const std::string what = std::string(dataTypeName(t)) + " " + reduceOpName(op) +
                                   " count=" + std::to_string(count) + " srcs=" +
                                   std::to_string(n);
          const size_t size = dataTypeSize(t);
          Buffers b(t, n, count, rng);
          std::vector<Expected> want;
          for (size_t i = 0; i < count; ++i) want.push_back(reference(t, op, b.srcs, i, 1.0));
          // dst == srcs[0]
          unsigned char* inout = b.storage[0].data() + (b.srcs[0] - b.storage[0].data());
          std::vector<const void*> srcs(b.srcs.begin(), b.srcs.end());
          if (n == 2) {
            reduceInto(inout, srcs[1], count, t, op);
          } else {
            reduceMany(inout, srcs.data(), n, count, t, op, 1.0);
          }
          for (size_t i = 0; i < count; ++i) {
            expectMatches(t, inout + i * size, want[i], i, what);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST_P(ReduceKernelsTest, CopyScaled) {
  std::mt19937 rng(5);
  for (DataType t : kAllTypes) {
    for (double scale : {1.0, 0.5, -3.0}) {
      const size_t count = 1037, size = dataTypeSize(t);
      Buffers b(t, 1, count, rng);
      copyScaled(b.dst, b.srcs[0], count, t, scale);
      for (size_t i = 0; i < count; ++i) {
        expectMatches(t, b.dst + i * size, reference(t, ReduceOp::kSum, b.srcs, i, scale), i,
                      dataTypeName(t));
        if (HasFatalFailure()) return;
      }
      // In place.
      std::vector<unsigned char> copy(b.srcs[0], b.srcs[0] + count * size);
      std::vector<const unsigned char*> original = {copy.data()};
      auto* inout = const_cast<unsigned char*>(b.srcs[0]);
      copyScaled(inout, inout, count, t, scale);
      for (size_t i = 0; i < count; ++i) {
        expectMatches(t, inout + i * size, reference(t, ReduceOp::kSum, original, i, scale), i,
                      std::string("in place ") + dataTypeName(t));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The vector conversions agree with the scalar ones on every half, NaN and infinity included.
TEST_P(ReduceKernelsTest, VectorHalfConversionsCoverEveryPattern) {
  std::vector<uint16_t> all(65536), out(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool half = t == DataType::kFloat16;
    copyScaled(out.data(), all.data(), all.size(), t, 3.0);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float f = (half ? halfToFloat(all[i]) : bfloat16ToFloat(all[i])) * 3.0f;
      const uint16_t want = half ? floatToHalf(f) : floatToBfloat16(f);
      if (half ? isHalfNan(want) : isBfloat16Nan(want)) {
        ASSERT_TRUE(half ? isHalfNan(out[i]) : isBfloat16Nan(out[i])) << i;
      } else {
        ASSERT_EQ(out[i], want) << dataTypeName(t) << " pattern " << i;
      }
    }
  }
}

TEST_P(ReduceKernelsTest, IntegerScalingSaturatesAndTruncates) {
  const int32_t in[] = {7, -7, 2000000000, -2000000000};
  int32_t out[4];
  copyScaled(out, in, 4, DataType::kInt32, 1.5);
  EXPECT_EQ(out[0], 10);
  EXPECT_EQ(out[1], -10);
  EXPECT_EQ(out[2], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(out[3], std::numeric_limits<int32_t>::min());
  const uint8_t bytes[] = {200, 3};
  uint8_t scaled[2];
  copyScaled(scaled, bytes, 2, DataType::kUInt8, -1.0);
  EXPECT_EQ(scaled[0], 0);
  copyScaled(scaled, bytes, 2, DataType::kUInt8, 2.0);
  EXPECT_EQ(scaled[0], 255);
  EXPECT_EQ(scaled[1], 6);
}

TEST_P(ReduceKernelsTest, IntegerSumWraps) {
  const int8_t a[] = {127, -128}, b[] = {1, -1};
  int8_t out[2];
  const void* srcs[] = {a, b};
  reduceMany(out, srcs, 2, 2, DataType::kInt8, ReduceOp::kSum, 1.0);
  EXPECT_EQ(out[0], -128);
  EXPECT_EQ(out[1], 127);
  const int64_t big[] = {std::numeric_limits<int64_t>::max()};
  int64_t product[1];
  const void* squares[] = {big, big};
  reduceMany(product, squares, 2, 1, DataType::kInt64, ReduceOp::kProduct, 1.0);
  EXPECT_EQ(product[0], 1);
}

std::string isaName(const ::testing::TestParamInfo<KernelIsa>& info) {
  return kernelIsaName(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, ReduceKernelsTest,
                         ::testing::Values(KernelIsa::kBaseline, KernelIsa::kAvx2,
                                           KernelIsa::kAvx512),
                         isaName);

TEST(ReduceKernels, CheckReducible) {
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      if (t == DataType::kBool && op == ReduceOp::kAverage) {
        try {
          checkReducible(t, op);
          ADD_FAILURE() << "average of bool accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        }
      } else {
        EXPECT_NO_THROW(checkReducible(t, op)) << dataTypeName(t) << " " << reduceOpName(op);
      }
    }
  }
  EXPECT_THROW(checkReducible(static_cast<DataType>(42), ReduceOp::kSum), Error);
  EXPECT_THROW(checkReducible(DataType::kFloat32, static_cast<ReduceOp>(9)), Error);
}

TEST(ReduceKernels, BestIsaIsChosen) {
  if (kernelIsaSupported(KernelIsa::kAvx512)) {
    EXPECT_EQ(activeKernelIsa(), KernelIsa::kAvx512);
  } else if (kernelIsaSupported(KernelIsa::kAvx2)) {
    EXPECT_EQ(activeKernelIsa(), KernelIsa::kAvx2);
  }
}

TEST(DataTypes, NamesAndSizes) {
  EXPECT_STREQ(dataTypeName(DataType::kBFloat16), "bfloat16");
  EXPECT_STREQ(dataTypeName(DataType::kUInt8), "uint8");
  EXPECT_EQ(dataTypeSize(DataType::kFloat16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(dataTypeSize(DataType::kBool), 1u);
  EXPECT_TRUE(isFloatingPoint(DataType::kBFloat16));
  EXPECT_FALSE(isFloatingPoint(DataType::kBool));
  EXPECT_STREQ(reduceOpName(ReduceOp::kAverage), "average");
  EXPECT_STREQ(reduceOpName(ReduceOp::kProduct), "product");
}

}  // namespace
}  // namespace ronde
