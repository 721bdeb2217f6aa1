// The host reference of the device fusion copies (src/cuda/batched_copy.h) against values
// worked out by hand: where pack puts each tensor, how scales round and saturate, the float16
// and bfloat16 bit patterns of casts (round to nearest even), the errors for conversions that
// do not exist, and how the launch plan covers a table. The GPU test (tests/gpu) holds the
// kernels to this reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda/batched_copy.h"
#include "ronde/errors.h"

namespace ronde::cuda {
namespace {

template <class To, class From>
std::vector<To> convert(const std::vector<From>& in, DataType from, DataType to, double scale) {
  std::vector<To> out(in.size());
  referenceBatchedCopy({{in.data(), out.data(), in.size()}}, {from, to, scale});
  return out;
}

TEST(BatchedCopyReference, PackPlacesEachTensorOnAnAlignedOffsetAndUnpackRestoresIt) {
  std::vector<float> a = {1, 2, 3}, c = {5, 6, 7, 8, 9};
  std::vector<float> b;  // an empty tensor still gets an offset
  const std::vector<uint64_t> counts = {3, 0, 5};
  FusionLayout layout = layoutFusion(counts, DataType::kFloat32);
  EXPECT_EQ(layout.offsets, (std::vector<uint64_t>{0, 256, 256}));
  EXPECT_EQ(layout.bytes, 256u + 5 * 4);

  std::vector<uint8_t> buffer(layout.bytes, 0xee);
  auto pack = packSegments({a.data(), b.data(), c.data()}, counts, buffer.data(), layout);
  referenceBatchedCopy(pack, {DataType::kFloat32, DataType::kFloat32, 0.5});
  float packed[5];
  std::memcpy(packed, buffer.data(), 3 * 4);
  EXPECT_EQ(packed[0], 0.5f);
  EXPECT_EQ(packed[2], 1.5f);
  EXPECT_EQ(buffer[12], 0xee) << "the gap between tensors is left alone";
  std::memcpy(packed, buffer.data() + 256, 5 * 4);
  EXPECT_EQ(packed[4], 4.5f);

  std::vector<float> a2(3), b2, c2(5);
  auto unpack = unpackSegments(buffer.data(), {a2.data(), b2.data(), c2.data()}, counts, layout,
                               DataType::kFloat32);
  referenceBatchedCopy(unpack, {DataType::kFloat32, DataType::kFloat32, 2.0});
  EXPECT_EQ(a2, a);
  EXPECT_EQ(c2, c);
}

TEST(BatchedCopyReference, Float32ToFloat16RoundsToNearestEvenAndOverflowsToInfinity) {
  const float tie_low = 1.0f + 0x1p-11f;       // halfway between 1 and the next half: to even
  const float tie_high = 1.0f + 3 * 0x1p-11f;  // halfway between 0x3c01 and 0x3c02: to even
  std::vector<float> in = {1.0f, -2.0f, 65504.0f, 65520.0f, tie_low, tie_high, 0x1p-24f, 0.0f};
  auto out = convert<uint16_t>(in, DataType::kFloat32, DataType::kFloat16, 1.0);
  EXPECT_EQ(
      out, (std::vector<uint16_t>{0x3c00, 0xc000, 0x7bff, 0x7c00, 0x3c00, 0x3c02, 0x0001, 0x0000}));
  // The scale applies in float32 before the rounding.
  auto scaled =
      convert<uint16_t>(std::vector<float>{3.0f}, DataType::kFloat32, DataType::kFloat16, 0.5);
  EXPECT_EQ(scaled[0], 0x3e00);  // 1.5
}

TEST(BatchedCopyReference, Float32ToBfloat16RoundsToNearestEven) {
  std::vector<float> in = {1.0f, 3.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -0.5f};
  auto out = convert<uint16_t>(in, DataType::kFloat32, DataType::kBFloat16, 1.0);
  EXPECT_EQ(out, (std::vector<uint16_t>{0x3f80, 0x4040, 0x3f80, 0x3f82, 0xbf00}));
}

TEST(BatchedCopyReference, HalfWidthFloatsWidenExactlyThenScale) {
  std::vector<uint16_t> half = {0x3c00, 0x7bff, 0x0001, 0xfc00};
  auto f = convert<float>(half, DataType::kFloat16, DataType::kFloat32, 2.0);
  EXPECT_EQ(f[0], 2.0f);
  EXPECT_EQ(f[1], 131008.0f);
  EXPECT_EQ(f[2], 0x1p-23f);
  EXPECT_EQ(f[3], -std::numeric_limits<float>::infinity());
  std::vector<uint16_t> bf = {0x3f80, 0x4040};
  auto g = convert<float>(bf, DataType::kBFloat16, DataType::kFloat32, 0.25);
  EXPECT_EQ(g, (std::vector<float>{0.25f, 0.75f}));
  // Same type, scaled: widened, multiplied, rounded back.
  auto h = convert<uint16_t>(half, DataType::kFloat16, DataType::kFloat16, 2.0);
  EXPECT_EQ(h[0], 0x4000);  // 2.0
  EXPECT_EQ(h[1], 0x7c00);  // 131008 overflows float16
}

TEST(BatchedCopyReference, IntegersTruncateTowardZeroAndSaturate) {
  auto i32 =
      convert<int32_t>(std::vector<int32_t>{7, -7, 1}, DataType::kInt32, DataType::kInt32, 0.5);
  EXPECT_EQ(i32, (std::vector<int32_t>{3, -3, 0}));
  auto i8 =
      convert<int8_t>(std::vector<int8_t>{100, -100, 1}, DataType::kInt8, DataType::kInt8, 100.0);
  EXPECT_EQ(i8, (std::vector<int8_t>{127, -128, 100}));
  auto u8 = convert<uint8_t>(std::vector<uint8_t>{5, 0}, DataType::kUInt8, DataType::kUInt8, -1.0);
  EXPECT_EQ(u8, (std::vector<uint8_t>{0, 0}));
  auto i64 = convert<int64_t>(std::vector<int64_t>{INT64_MAX, -9}, DataType::kInt64,
                              DataType::kInt64, 4.0);
  EXPECT_EQ(i64, (std::vector<int64_t>{INT64_MAX, -36}));
  auto f64 = convert<double>(std::vector<double>{0.1}, DataType::kFloat64, DataType::kFloat64, 3.0);
  EXPECT_EQ(f64[0], 0.1 * 3.0);
}

TEST(BatchedCopyReference, UnscaledCopiesMoveBytesOfAnyTypeIncludingBool) {
  std::vector<uint8_t> flags = {1, 0, 1};
  auto out = convert<uint8_t>(flags, DataType::kBool, DataType::kBool, 1.0);
  EXPECT_EQ(out, flags);
}

TEST(BatchedCopyReference, ConversionsThatDoNotExistAreClearErrors) {
  auto expectInvalid = [](CopyConversion c, const char* words) {
    try {
      checkConversion(c);
      FAIL() << "accepted " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expectInvalid({DataType::kBool, DataType::kBool, 2.0}, "bool cannot be scaled");
  expectInvalid({DataType::kFloat32, DataType::kInt32, 1.0}, "no cast from float32 to int32");
  expectInvalid({DataType::kFloat16, DataType::kBFloat16, 1.0}, "no cast from float16");
  expectInvalid({DataType::kFloat32, DataType::kFloat32, std::numeric_limits<double>::quiet_NaN()},
                "finite");
  EXPECT_THROW(planLaunches({}, {DataType::kFloat64, DataType::kFloat16, 1.0}), Error);
}

TEST(BatchedCopyReference, PlanCopiesAlignedTensorsInSixteenByteWordsInOneLaunch) {
  // 200 x 16 KiB, the benchmark's fusion: one launch, one block per tensor.
  std::vector<float> data(200 * 4096 + 64);
  std::vector<float> fused(200 * 4096 + 64);
  auto* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(data.data()) + 255) & ~255ull);
  auto* out = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(fused.data()) + 255) & ~255ull);
  std::vector<CopySegment> segments;
  for (int i = 0; i < 200; ++i) segments.push_back({base + i * 4096, out + i * 4096, 4096});
  LaunchPlan plan = planLaunches(segments, {DataType::kFloat32, DataType::kFloat32, 1.0});
  EXPECT_EQ(plan.raw_unit_bytes, 16u);
  ASSERT_EQ(plan.launches.size(), 1u);
  EXPECT_EQ(plan.launches[0].blocks, 200u);
  EXPECT_EQ(plan.launches[0].segments[7].count, 4096u * 4 / 16);
  EXPECT_EQ(plan.launches[0].segments[7].first_block, 7u);

  // One address 4 bytes off: 4-byte words. Scaled: elements, and blocks of 2048.
  segments[3].src = base + 1;
  EXPECT_EQ(planLaunches(segments, {DataType::kFloat32, DataType::kFloat32, 1.0}).raw_unit_bytes,
            4u);
  LaunchPlan scaled = planLaunches(segments, {DataType::kFloat32, DataType::kFloat32, 0.5});
  EXPECT_EQ(scaled.raw_unit_bytes, 0u);
  EXPECT_EQ(scaled.launches[0].blocks, 400u);
  EXPECT_EQ(scaled.launches[0].segments[1].first_block, 2u);
}

TEST(BatchedCopyReference, PlanSplitsLongTablesAndDropsEmptySegments) {
  std::vector<uint8_t> bytes(3000);
  std::vector<CopySegment> segments;
  for (int i = 0; i < 600; ++i) {
    segments.push_back({bytes.data() + i, bytes.data() + 1000 + i * 3, i % 3 == 0 ? 0u : 3u});
  }
  LaunchPlan plan = planLaunches(segments, {DataType::kUInt8, DataType::kUInt8, 1.0});
  EXPECT_EQ(plan.raw_unit_bytes, 1u);
  ASSERT_EQ(plan.launches.size(), 1u);  // 400 non-empty segments
  EXPECT_EQ(plan.launches[0].segments.size(), 400u);
  for (int i = 0; i < 900; ++i) segments.push_back({bytes.data(), bytes.data() + 2000, 1});
  plan = planLaunches(segments, {DataType::kUInt8, DataType::kUInt8, 1.0});
  ASSERT_EQ(plan.launches.size(), 3u);  // 1300 segments: 512 + 512 + 276
  EXPECT_EQ(plan.launches[0].segments.size(), kMaxSegmentsPerLaunch);
  EXPECT_EQ(plan.launches[2].segments.size(), 1300 - 2 * kMaxSegmentsPerLaunch);
  EXPECT_EQ(plan.launches[1].segments[0].first_block, 0u) << "each launch counts its own blocks";
}

TEST(BatchedCopyReference, DeviceCopiesInABuildWithoutCudaAreAClearError) {
  if (deviceCopiesBuilt()) GTEST_SKIP() << "this build has the CUDA kernels (tests/gpu runs them)";
  try {
    launchBatchedCopy({}, {}, nullptr);
    FAIL() << "a build without CUDA launched";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
  }
}

}  // namespace
}  // namespace ronde::cuda
