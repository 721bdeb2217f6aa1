// Host staging of CUDA tensors, on the CPU: the chunk pipeline (runtime/device_staging.h) on
// host memory standing in for a device (runtime/device_host_memory.h), asynchronous as a GPU's
// copies are and slowed per copy so that a missing wait reads stale bytes. The executor's
// device path is tested in device_staging_test.cc; the same code runs on a GPU in
// scripts/device_check.sh.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "runtime/device_host_memory.h"
#include "runtime/device_staging.h"
#include "support/slow_device.h"

namespace ronde::testing {
namespace {

using runtime::DeviceOps;
using runtime::HostMemoryDevice;
using runtime::HostMemoryDeviceOptions;
using runtime::StagingContext;

Deadline soon() { return Deadline::after(std::chrono::seconds(30)); }

std::vector<int32_t> iota(size_t n, int32_t from) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from + static_cast<int32_t>(i);
  return v;
}

TEST(DeviceStaging, ChunksCoverEveryElementOnceInOrder) {
  HostMemoryDevice device({Device::Kind::kCuda, 0}, slowCopies());
  const size_t chunk_bytes = 4096;
  for (size_t count : {size_t{1}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{3 * 1024 + 5}}) {
    std::vector<int32_t> in = iota(count, 1);
    std::vector<int32_t> out(count, -1);
    std::vector<size_t> chunks;
    StagingContext context{device, chunk_bytes, soon()};
    runtime::runStagedChunks(context, in.data(), out.data(), count, 4, true,
                             [&](unsigned char* host, size_t n) {
                               auto* v = reinterpret_cast<int32_t*>(host);
                               for (size_t i = 0; i < n; ++i) v[i] *= 2;
                               chunks.push_back(n);
                             });
    device.finish(7, soon());
    std::vector<size_t> expected_chunks;
    for (size_t left = count; left > 0; left -= std::min<size_t>(left, 1024))
      expected_chunks.push_back(std::min<size_t>(left, 1024));
    EXPECT_EQ(chunks, expected_chunks) << count << " elements";
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[i], 2 * in[i]) << "element " << i << " of " << count;
  }
}

TEST(DeviceStaging, OneChunkWhenTheCollectiveNeedsTheWholeBuffer) {
  HostMemoryDevice device({Device::Kind::kCuda, 0}, slowCopies());
  std::vector<int32_t> in = iota(5000, 3);
  std::vector<int32_t> out(in.size(), 0);
  int calls = 0;
  StagingContext context{device, 0, soon()};
  runtime::runStagedChunks(context, in.data(), out.data(), in.size(), 4, true,
                           [&](unsigned char* host, size_t n) {
                             ++calls;
                             EXPECT_EQ(n, in.size());
                             auto* v = reinterpret_cast<int32_t*>(host);
                             for (size_t i = 0; i < n; ++i) v[i] += 1;
                           });
  device.finish(0, soon());
  EXPECT_EQ(calls, 1);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] + 1);
}

TEST(DeviceStaging, MissingInputIsZerosOrLeftAloneAndMissingOutputIsNotWritten) {
  HostMemoryDevice device({Device::Kind::kCuda, 0}, slowCopies());
  StagingContext context{device, 4096, soon()};
  std::vector<int32_t> out(3000, -1);
  int64_t sum = 0;
  runtime::runStagedChunks(context, nullptr, out.data(), out.size(), 4, true,
                           [&](unsigned char* host, size_t n) {
                             auto* v = reinterpret_cast<int32_t*>(host);
                             for (size_t i = 0; i < n; ++i) sum += v[i];
                             for (size_t i = 0; i < n; ++i) v[i] = 9;
                           });
  device.finish(0, soon());
  EXPECT_EQ(sum, 0);  // zeros went in
  for (int32_t v : out) ASSERT_EQ(v, 9);

  // A receiver of a broadcast: nothing copied in, the host bytes are the collective's to fill.
  unsigned char* host = device.hostBuffer(3000 * 4);
  std::memset(host, 0x5a, 3000 * 4);
  std::vector<int32_t> in = iota(3000, 0);
  runtime::runStagedChunks(context, nullptr, nullptr, in.size(), 4, false,
                           [&](unsigned char* chunk, size_t n) {
                             EXPECT_EQ(chunk[0], 0x5a);
                             EXPECT_EQ(chunk[n * 4 - 1], 0x5a);
                           });
  device.finish(0, soon());
  EXPECT_EQ(device.copies(), 3u);  // the first run's three copies back; none in the second
}

TEST(DeviceStaging, ACopyFailingMidPipelineSurfacesAndTheDeviceRecovers) {
  HostMemoryDeviceOptions options = slowCopies();
  options.fail_at_copy = 2;  // the third device-to-host copy
  HostMemoryDevice device({Device::Kind::kCuda, 0}, options);
  StagingContext context{device, 4096, soon()};
  std::vector<int32_t> in = iota(4096, 0);
  std::vector<int32_t> out(in.size(), 0);
  int chunks = 0;
  try {
    runtime::runStagedChunks(context, in.data(), out.data(), in.size(), 4, true,
                             [&](unsigned char*, size_t) { ++chunks; });
    device.finish(0, soon());
    FAIL() << "the failed copy was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("injected copy failure"), std::string::npos) << e.what();
  }
  EXPECT_EQ(chunks, 2);  // the chunks before the failed one ran, no later one
  device.drain();
  // The next operation starts clean.
  runtime::runStagedChunks(context, in.data(), out.data(), in.size(), 4, true,
                           [&](unsigned char*, size_t) {});
  device.finish(0, soon());
  EXPECT_EQ(out, in);
}

// The waits of a pipeline that was slow to wait: the device has already run past the failed
// copy when the host waits for the ones before it, which landed (a CI run under ASan once saw
// the pipeline above fail before its first chunk because such a wait threw).
TEST(DeviceStaging, AWaitForCopiesBeforeAFailedOneDoesNotThrowItsError) {
  HostMemoryDeviceOptions options;
  options.fail_at_copy = 2;
  HostMemoryDevice device({Device::Kind::kCuda, 0}, options);
  std::vector<int32_t> in = iota(3, 5);
  std::vector<int32_t> host(3, 0);
  auto* bytes = reinterpret_cast<unsigned char*>(host.data());
  uint64_t first = device.toHost(bytes, &in[0], 4);
  uint64_t second = device.toHost(bytes + 4, &in[1], 4);
  uint64_t failed = device.toHost(bytes + 8, &in[2], 4);
  EXPECT_THROW(device.waitToHost(failed, soon()), Error);
  EXPECT_NO_THROW(device.waitToHost(first, soon()));
  EXPECT_NO_THROW(device.waitToHost(second, soon()));
  EXPECT_EQ(host, (std::vector<int32_t>{5, 6, 0}));
  device.drain();
}

TEST(DeviceStaging, ACollectiveFailingMidPipelineLeavesNoCopyRunning) {
  HostMemoryDevice device({Device::Kind::kCuda, 0}, slowCopies());
  StagingContext context{device, 4096, soon()};
  std::vector<int32_t> in = iota(8 * 1024, 0);
  std::vector<int32_t> out(in.size(), 0);
  int chunks = 0;
  EXPECT_THROW(runtime::runStagedChunks(context, in.data(), out.data(), in.size(), 4, true,
                                        [&](unsigned char*, size_t) {
                                          if (++chunks == 3) {
                                            throw makeError(ErrorCode::kPeerLost, "a peer left");
                                          }
                                        }),
               Error);
  device.drain();  // returns once every issued copy is done: the buffers are free again
  EXPECT_EQ(device.copies(), 8u + 2u);  // every chunk's copy in, the first two chunks' back
  for (size_t i = 0; i < 2 * 1024; ++i) ASSERT_EQ(out[i], in[i]);
  for (size_t i = 2 * 1024; i < out.size(); ++i) ASSERT_EQ(out[i], 0);
}

TEST(DeviceStaging, WholeBufferCopiesInChunks) {
  HostMemoryDevice device({Device::Kind::kCuda, 0}, slowCopies());
  StagingContext context{device, 4096, soon()};
  std::vector<unsigned char> src(10000), host(10000, 0), back(10000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7);
  runtime::stageToHost(context, host.data(), src.data(), src.size());
  EXPECT_EQ(host, src);  // landed before it returned
  EXPECT_EQ(device.copies(), 3u);
  runtime::stageToDevice(context, back.data(), host.data(), host.size());
  device.finish(0, soon());
  EXPECT_EQ(back, src);
}

// ---- The runtime's device path, over 2 ranks whose "CUDA" tensors are host memory ----

}  // namespace
}  // namespace ronde::testing
