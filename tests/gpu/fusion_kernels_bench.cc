// Kernel benchmarks of issue 13, timed with CUDA events on one GPU (scripts/device_check.sh
// runs it on the lent H200 and keeps its output):
//   - packing and unpacking 200 x 16 KiB float32 tensors: one batched launch against one
//     cudaMemcpyAsync per tensor (what per-tensor torch copies cost);
//   - bandwidth of the scale and float16 / bfloat16 cast kernels on 256 MiB against a
//     device-to-device cudaMemcpyAsync, counting bytes read + written;
//   - pinned host <-> device copies, the staging path's ceiling.
// Prints one line per figure, "name value unit", and the same as JSON lines to argv[1] if given.
#include <cuda_runtime.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cuda/batched_copy.h"

namespace {

using ronde::DataType;
namespace cuda = ronde::cuda;

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
  std::exit(2);
}

// Milliseconds per call of `body`, averaged over `reps` calls after `warmup`, on `stream`.
double timeMs(cudaStream_t stream, int warmup, int reps, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) body();
  check(cudaEventRecord(stop, stream), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / reps;
}

struct Report {
  std::ofstream json;
  void add(const std::string& name, double value, const char* unit) {
    std::printf("%-44s %10.3f %s\n", name.c_str(), value, unit);
    if (json)
      json << "{\"name\": \"" << name << "\", \"value\": " << value << ", \"unit\": \"" << unit
           << "\"}\n";
  }
};

}  // namespace

int main(int argc, char** argv) {
  Report report;
  if (argc > 1) report.json.open(argv[1]);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s\n", prop.name);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  // --- 200 x 16 KiB pack / unpack.
  const size_t tensors = 200, count = 4096;
  std::vector<uint64_t> counts(tensors, count);
  const cuda::FusionLayout layout = cuda::layoutFusion(counts, DataType::kFloat32);
  std::vector<void*> grads(tensors);
  std::vector<const void*> grads_in(tensors);
  for (size_t i = 0; i < tensors; ++i) {
    check(cudaMalloc(&grads[i], count * 4), "cudaMalloc");
    grads_in[i] = grads[i];
  }
  void* fused = nullptr;
  check(cudaMalloc(&fused, layout.bytes), "cudaMalloc");
  const auto pack = cuda::packSegments(grads_in, counts, fused, layout);
  const auto unpack = cuda::unpackSegments(fused, grads, counts, layout, DataType::kFloat32);
  const cuda::CopyConversion same{DataType::kFloat32, DataType::kFloat32, 1.0};
  const cuda::CopyConversion prescaled{DataType::kFloat32, DataType::kFloat32, 0.5};
  const cuda::CopyConversion to_half{DataType::kFloat32, DataType::kFloat16, 0.5};
  report.add("pack_200x16KiB_per_tensor_memcpy",
             1000 * timeMs(stream, 5, 100,
                           [&] {
                             for (const auto& s : pack) {
                               check(cudaMemcpyAsync(s.dst, s.src, s.count * 4,
                                                     cudaMemcpyDeviceToDevice, stream),
                                     "copy");
                             }
                           }),
             "us");
  report.add("pack_200x16KiB_batched",
             1000 * timeMs(stream, 5, 200, [&] { cuda::launchBatchedCopy(pack, same, stream); }),
             "us");
  report.add(
      "pack_200x16KiB_batched_prescale",
      1000 * timeMs(stream, 5, 200, [&] { cuda::launchBatchedCopy(pack, prescaled, stream); }),
      "us");
  report.add("unpack_200x16KiB_batched",
             1000 * timeMs(stream, 5, 200, [&] { cuda::launchBatchedCopy(unpack, same, stream); }),
             "us");
  report.add(
      "unpack_200x16KiB_batched_postscale",
      1000 * timeMs(stream, 5, 200, [&] { cuda::launchBatchedCopy(unpack, prescaled, stream); }),
      "us");
  {
    const auto layout16 = cuda::layoutFusion(counts, DataType::kFloat16);
    const auto pack16 = cuda::packSegments(grads_in, counts, fused, layout16);
    report.add(
        "pack_200x16KiB_batched_fp16_prescale",
        1000 * timeMs(stream, 5, 200, [&] { cuda::launchBatchedCopy(pack16, to_half, stream); }),
        "us");
  }

  // --- Bandwidth on 256 MiB of float32, bytes read + written per second.
  const size_t n = 64ull << 20;  // elements
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, n * 4), "cudaMalloc");
  check(cudaMalloc(&b, n * 4), "cudaMalloc");
  check(cudaMemsetAsync(a, 0, n * 4, stream), "cudaMemset");
  auto tbps = [](double bytes, double ms) { return bytes / (ms * 1e-3) / 1e12; };
  const double copy_ms = timeMs(stream, 3, 20, [&] {
    check(cudaMemcpyAsync(b, a, n * 4, cudaMemcpyDeviceToDevice, stream), "copy");
  });
  const double copy_bw = tbps(2.0 * n * 4, copy_ms);
  report.add("d2d_memcpy_256MiB", copy_bw, "TB/s");
  struct Case {
    const char* name;
    cuda::CopyConversion conversion;
    double bytes_per_element;
  };
  const Case cases[] = {
      {"batched_copy_fp32_256MiB", {DataType::kFloat32, DataType::kFloat32, 1.0}, 8},
      {"scale_fp32_256MiB", {DataType::kFloat32, DataType::kFloat32, 0.5}, 8},
      {"cast_fp32_to_fp16_256MiB", {DataType::kFloat32, DataType::kFloat16, 1.0}, 6},
      {"cast_fp32_to_bf16_256MiB", {DataType::kFloat32, DataType::kBFloat16, 1.0}, 6},
      {"cast_fp16_to_fp32_256MiB", {DataType::kFloat16, DataType::kFloat32, 1.0}, 6},
      {"scale_fp16_256MiB", {DataType::kFloat16, DataType::kFloat16, 0.5}, 4},
  };
  for (const Case& c : cases) {
    const double ms = timeMs(stream, 3, 20, [&] {
      cuda::launchBatchedCopy({{a, b, n}}, c.conversion, stream);
    });
    const double bw = tbps(c.bytes_per_element * n, ms);
    report.add(c.name, bw, "TB/s");
    report.add(std::string(c.name) + "_vs_d2d", 100.0 * bw / copy_bw, "%");
  }

  // --- Pinned host <-> device, 256 MiB each way.
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, n * 4), "cudaMallocHost");
  const double h2d = timeMs(stream, 2, 10, [&] {
    check(cudaMemcpyAsync(a, pinned, n * 4, cudaMemcpyHostToDevice, stream), "h2d");
  });
  const double d2h = timeMs(stream, 2, 10, [&] {
    check(cudaMemcpyAsync(pinned, a, n * 4, cudaMemcpyDeviceToHost, stream), "d2h");
  });
  report.add("pinned_h2d_256MiB", n * 4 / (h2d * 1e-3) / 1e9, "GB/s");
  report.add("pinned_d2h_256MiB", n * 4 / (d2h * 1e-3) / 1e9, "GB/s");

  cudaFreeHost(pinned);
  cudaFree(a);
  cudaFree(b);
  cudaFree(fused);
  for (void* g : grads) cudaFree(g);
  cudaStreamDestroy(stream);
  return 0;
}
