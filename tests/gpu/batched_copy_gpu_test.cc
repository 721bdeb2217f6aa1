// The device fusion kernels (src/cuda/batched_copy.cu) against the host reference, bit for
// bit: every conversion, tables long enough for several launches, odd counts and misaligned
// addresses (the narrower raw-copy words), and the pack / unpack round trip of a fusion.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/half.h"
#include "cuda/batched_copy.h"
#include "gpu_available.h"

namespace ronde::cuda {
namespace {

void checkCuda(cudaError_t status) { ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status); }

// Random source bytes that are ordinary values of `type` (no NaN: its payload is not part of
// the contract), with zeros, infinities and subnormals among the floats.
std::vector<uint8_t> randomValues(DataType type, size_t count, std::mt19937& rng) {
  std::vector<uint8_t> bytes(count * dataTypeSize(type));
  std::uniform_real_distribution<float> real(-300.0f, 300.0f);
  std::uniform_int_distribution<int> any(-1000000, 1000000);
  for (size_t i = 0; i < count; ++i) {
    float f = real(rng);
    if (i % 97 == 5) f = std::numeric_limits<float>::infinity();
    if (i % 89 == 3) f = 1e-40f;  // a float32 subnormal
    if (i % 83 == 1) f = 0.0f;
    uint8_t* at = bytes.data() + i * dataTypeSize(type);
    const int v = any(rng);
    switch (type) {
      case DataType::kFloat32:
        std::memcpy(at, &f, 4);
        break;
      case DataType::kFloat64: {
        const double d = static_cast<double>(f) * 1.000001;
        std::memcpy(at, &d, 8);
        break;
      }
      case DataType::kFloat16: {
        const uint16_t h = floatToHalf(f * 0.01f);
        std::memcpy(at, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t b = floatToBfloat16(f);
        std::memcpy(at, &b, 2);
        break;
      }
      case DataType::kBool:
        *at = static_cast<uint8_t>(v & 1);
        break;
      default: {  // the low bytes of a 64-bit value
        const int64_t wide = static_cast<int64_t>(v) * 1000003;
        std::memcpy(at, &wide, dataTypeSize(type));
        break;
      }
    }
  }
  return bytes;
}

struct DeviceBytes {
  explicit DeviceBytes(size_t bytes) { checkCuda(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes)); }
  ~DeviceBytes() { cudaFree(ptr); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  uint8_t* data() { return static_cast<uint8_t*>(ptr); }
  void* ptr = nullptr;
};

// Runs `segments` (offsets into one source and one destination arena) on the device and on the
// host; the destination arenas must end up identical, gaps included.
void expectDeviceMatchesReference(const CopyConversion& c, size_t segments, size_t max_count,
                                  bool misalign, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> count_of(0, max_count);
  const size_t in_size = dataTypeSize(c.src_type), out_size = dataTypeSize(c.dst_type);
  std::vector<size_t> counts(segments), src_at(segments), dst_at(segments);
  size_t src_elems = 0, dst_elems = 0;
  for (size_t i = 0; i < segments; ++i) {
    counts[i] = i % 50 == 0 ? max_count * 20 : count_of(rng);  // a few big ones
    const size_t skew = misalign ? (i % 3) : 0;                // elements off the aligned start
    src_at[i] = src_elems + skew;
    dst_at[i] = dst_elems + skew;
    src_elems += counts[i] + 64;
    dst_elems += counts[i] + 64;
  }
  std::vector<uint8_t> src = randomValues(c.src_type, src_elems, rng);
  std::vector<uint8_t> expected(dst_elems * out_size, 0xab), actual(expected.size());
  DeviceBytes d_src(src.size()), d_dst(expected.size());
  checkCuda(cudaMemcpy(d_src.ptr, src.data(), src.size(), cudaMemcpyHostToDevice));
  checkCuda(cudaMemcpy(d_dst.ptr, expected.data(), expected.size(), cudaMemcpyHostToDevice));
  std::vector<CopySegment> host, device;
  for (size_t i = 0; i < segments; ++i) {
    host.push_back(
        {src.data() + src_at[i] * in_size, expected.data() + dst_at[i] * out_size, counts[i]});
    device.push_back(
        {d_src.data() + src_at[i] * in_size, d_dst.data() + dst_at[i] * out_size, counts[i]});
  }
  referenceBatchedCopy(host, c);
  cudaStream_t stream;
  checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launchBatchedCopy(device, c, stream);
  checkCuda(cudaStreamSynchronize(stream));
  checkCuda(cudaStreamDestroy(stream));
  checkCuda(cudaMemcpy(actual.data(), d_dst.ptr, actual.size(), cudaMemcpyDeviceToHost));
  size_t first_bad = actual.size();
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i]) {
      first_bad = i;
      break;
    }
  }
  EXPECT_EQ(first_bad, actual.size())
      << dataTypeName(c.src_type) << " -> " << dataTypeName(c.dst_type) << " x " << c.scale
      << ": first differing byte " << first_bad << " (element " << first_bad / out_size << ")";
}

const DataType kAllTypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                              DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                              DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
                              DataType::kBool,     DataType::kUInt16};

TEST(BatchedCopyGpu, RawCopiesOfEveryTypeMatchTheReference) {
  RONDE_SKIP_WITHOUT_GPU();
  for (DataType type : kAllTypes) {
    for (bool misalign : {false, true}) {
      expectDeviceMatchesReference({type, type, 1.0}, 700, 3000, misalign, 1);
    }
  }
}

TEST(BatchedCopyGpu, ScaledCopiesOfEveryNumericTypeMatchTheReference) {
  RONDE_SKIP_WITHOUT_GPU();
  for (DataType type : kAllTypes) {
    if (type == DataType::kBool) continue;
    for (double scale : {0.5, -1.75, 1.0 / 3.0, 1e5}) {
      expectDeviceMatchesReference({type, type, scale}, 300, 5000, true, 2);
    }
  }
}

TEST(BatchedCopyGpu, CompressionCastsMatchTheReference) {
  RONDE_SKIP_WITHOUT_GPU();
  for (DataType half : {DataType::kFloat16, DataType::kBFloat16}) {
    for (double scale : {1.0, 0.125, 1.0 / 7.0}) {
      expectDeviceMatchesReference({DataType::kFloat32, half, scale}, 600, 4000, true, 3);
      expectDeviceMatchesReference({half, DataType::kFloat32, scale}, 600, 4000, true, 4);
    }
  }
}

TEST(BatchedCopyGpu, PackThenUnpackOfManyTensorsRoundTrips) {
  RONDE_SKIP_WITHOUT_GPU();
  // 200 float32 tensors of odd sizes, packed as float16 with prescale 0.5 and unpacked with
  // postscale 2: each value comes back as float16(x / 2) * 2, the reference's own round trip.
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint64_t> count_of(1, 5000);
  std::vector<uint64_t> counts(200);
  for (auto& c : counts) c = count_of(rng);
  const FusionLayout layout = layoutFusion(counts, DataType::kFloat16);
  std::vector<std::vector<float>> host(200);
  std::vector<const void*> d_in;
  std::vector<void*> d_out;
  std::vector<std::unique_ptr<DeviceBytes>> owned;
  for (size_t i = 0; i < 200; ++i) {
    auto bytes = randomValues(DataType::kFloat32, counts[i], rng);
    host[i].resize(counts[i]);
    std::memcpy(host[i].data(), bytes.data(), bytes.size());
    owned.push_back(std::make_unique<DeviceBytes>(bytes.size()));
    checkCuda(cudaMemcpy(owned.back()->ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    d_in.push_back(owned.back()->ptr);
    owned.push_back(std::make_unique<DeviceBytes>(bytes.size()));
    d_out.push_back(owned.back()->ptr);
  }
  DeviceBytes buffer(layout.bytes);
  launchBatchedCopy(packSegments(d_in, counts, buffer.ptr, layout),
                    {DataType::kFloat32, DataType::kFloat16, 0.5}, nullptr);
  launchBatchedCopy(unpackSegments(buffer.ptr, d_out, counts, layout, DataType::kFloat16),
                    {DataType::kFloat16, DataType::kFloat32, 2.0}, nullptr);
  checkCuda(cudaDeviceSynchronize());
  for (size_t i = 0; i < 200; ++i) {
    std::vector<float> got(counts[i]);
    checkCuda(cudaMemcpy(got.data(), d_out[i], counts[i] * 4, cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < counts[i]; ++j) {
      const float expected = halfToFloat(floatToHalf(host[i][j] * 0.5f)) * 2.0f;
      ASSERT_EQ(got[j], expected) << "tensor " << i << " element " << j << " of " << host[i][j];
    }
  }
}

}  // namespace
}  // namespace ronde::cuda
