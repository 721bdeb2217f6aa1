#include "runtime_gpu_harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <thread>

#include "support/adasum_reference.h"
#include "support/reference.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {

void check(cudaError_t status, const char* what) {
  REQUIRE(status == cudaSuccess, what << ": " << cudaGetErrorString(status));
}

CudaTensor::CudaTensor(DataType type, std::vector<int64_t> shape, int gpu)
    : type_(type), shape_(std::move(shape)), gpu_(gpu) {
  check(cudaSetDevice(gpu), "cudaSetDevice");
  check(cudaMalloc(&data_, std::max<size_t>(numel() * sizeOf(type), 1)), "cudaMalloc");
}

CudaTensor::~CudaTensor() { cudaFree(data_); }

GatedStream::GatedStream(int gpu) : gpu(gpu) {
  check(cudaSetDevice(gpu), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

GatedStream::~GatedStream() {
  open = true;
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

namespace {

void waitForTheGate(void* self) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!static_cast<GatedStream*>(self)->open && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

void GatedStream::hold() {
  open = false;
  check(cudaLaunchHostFunc(stream, waitForTheGate, this), "cudaLaunchHostFunc");
}

void GatedStream::release() {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  open = true;
}

std::shared_ptr<CudaTensor> GatedStream::input(DataType type, std::vector<int64_t> shape, int rank,
                                               int salt) {
  auto t = std::make_shared<CudaTensor>(type, std::move(shape), gpu);
  check(cudaMemset(t->data(), 0, std::max<size_t>(t->bytes(), 1)), "cudaMemset");
  std::vector<unsigned char>& host = staged.emplace_back(std::max<size_t>(t->bytes(), 1));
  for (size_t i = 0; i < t->numel(); ++i)
    storeValue(type, host.data(), i, inputValue(type, rank, i, salt));
  check(cudaMemcpyAsync(t->data(), host.data(), t->bytes(), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync");
  return t;
}

std::vector<unsigned char> GatedStream::read(Tensor& t) {
  std::vector<unsigned char> host(std::max<size_t>(t.bytes(), 1));
  check(cudaMemcpyAsync(host.data(), t.data(), t.bytes(), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return host;
}

Settings stagingSettings(int64_t fusion_threshold) {
  Settings s = runtimeTestSettings();
  s.gpu_operations = GpuOperations::kHost;
  s.gpu_staging_chunk_bytes = 64 * 1024;
  s.fusion_threshold_bytes = fusion_threshold;
  return s;
}

Settings ncclSettings(int64_t fusion_threshold) {
  Settings s = stagingSettings(fusion_threshold);
  s.gpu_operations = GpuOperations::kNccl;
  return s;
}

void allreduceEverything(Runtime& rt, int rank, int size, int gpu) {
  GatedStream s(gpu);
  s.hold();
  struct Case {
    DataType type;
    ReduceOp op;
    double pre = 1, post = 1;
    int salt;
    std::shared_ptr<CudaTensor> tensor;
    std::shared_ptr<Handle> handle;
  };
  std::vector<Case> cases;
  int salt = 0;
  for (DataType type : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      if (type == DataType::kBool && op == ReduceOp::kAverage) continue;
      if ((type == DataType::kInt16 || type == DataType::kUInt16) && op == ReduceOp::kProduct)
        continue;
      for (int64_t n : {int64_t{100000}, int64_t{3}}) {  // several 64 KiB chunks, and a few
        Case c;
        c.type = type;
        c.op = op;
        c.salt = ++salt;
        if (isFloat(type) && (op == ReduceOp::kSum || op == ReduceOp::kAverage)) {
          c.pre = 0.5;
          c.post = 3.0;
        }
        c.tensor = s.input(type, {n}, rank, c.salt);
        cases.push_back(c);
      }
    }
  }
  for (Case& c : cases) {
    Request r;
    r.name = "ar." + std::to_string(c.salt);
    r.input = r.output = c.tensor;
    r.op = c.op;
    r.scaling = {c.pre, c.post};
    r.stream = s.id();
    c.handle = rt.enqueue(r);
  }
  s.release();
  for (Case& c : cases) {
    c.handle->wait(std::chrono::seconds(120));
    std::vector<unsigned char> got = s.read(*c.tensor);
    for (size_t i = 0; i < c.tensor->numel(); ++i) {
      double want = expectedAllreduce(c.type, c.op, size, i, c.salt, c.pre, c.post);
      double value = loadValue(c.type, got.data(), i);
      REQUIRE(value == want, dataTypeName(c.type)
                                 << " " << reduceOpName(c.op) << " element " << i << " of "
                                 << c.tensor->numel() << ": " << value << ", expected " << want);
    }
  }
}

void otherKinds(Runtime& rt, int rank, int size, int gpu) {
  GatedStream s(gpu);
  for (DataType type :
       {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kUInt8}) {
    s.hold();
    const std::string tag = dataTypeName(type);
    std::vector<std::function<void()>> checks;
    for (int k = 0; k < 2; ++k) {  // two of each, fused when the threshold allows
      auto in = s.input(type, {3000 + rank, 5}, rank, 10 + k);
      Request r;
      r.kind = RequestKind::kAllgather;
      r.name = "ag." + tag + std::to_string(k);
      r.input = in;
      r.stream = s.id();
      auto h = rt.enqueue(r);
      checks.push_back([&s, h, k, size, type] {
        h->wait(std::chrono::seconds(120));
        auto out = h->output();
        REQUIRE(out->device().kind == Device::Kind::kCuda, "allgather output on the GPU");
        std::vector<unsigned char> got = s.read(*out);
        size_t at = 0;
        for (int src = 0; src < size; ++src) {
          for (size_t i = 0; i < static_cast<size_t>(3000 + src) * 5; ++i, ++at)
            REQUIRE(loadValue(type, got.data(), at) == inputValue(type, src, i, 10 + k),
                    "allgather " << dataTypeName(type) << " from " << src << " element " << i);
        }
      });
      auto b = s.input(type, {20000 + k}, rank, 20 + k);
      const int root = size - 1;
      Request br;
      br.kind = RequestKind::kBroadcast;
      br.name = "bc." + tag + std::to_string(k);
      br.input = br.output = b;
      br.root = root;
      br.stream = s.id();
      auto bh = rt.enqueue(br);
      checks.push_back([&s, bh, b, k, type, root] {
        bh->wait(std::chrono::seconds(120));
        std::vector<unsigned char> got = s.read(*b);
        for (size_t i = 0; i < b->numel(); ++i)
          REQUIRE(loadValue(type, got.data(), i) == inputValue(type, root, i, 20 + k),
                  "broadcast " << dataTypeName(type) << " element " << i);
      });
    }
    {
      auto in = s.input(type, {static_cast<int64_t>(size) * 700, 3}, rank, 30);
      Request r;
      r.kind = RequestKind::kAlltoall;
      r.name = "a2a." + tag;
      r.input = in;
      r.stream = s.id();
      auto h = rt.enqueue(r);
      checks.push_back([&s, h, rank, size, type] {
        h->wait(std::chrono::seconds(120));
        std::vector<unsigned char> got = s.read(*h->output());
        const size_t block = 700 * 3;
        for (int src = 0; src < size; ++src) {
          for (size_t i = 0; i < block; ++i) {
            size_t sent = static_cast<size_t>(rank) * block + i;  // src's rows for this rank
            REQUIRE(loadValue(type, got.data(), static_cast<size_t>(src) * block + i) ==
                        inputValue(type, src, sent, 30),
                    "alltoall " << dataTypeName(type) << " from " << src << " element " << i);
          }
        }
      });
    }
    if (type != DataType::kUInt8) {
      auto in = s.input(type, {1001, 4}, rank, 40);
      Request r;
      r.kind = RequestKind::kReducescatter;
      r.name = "rs." + tag;
      r.input = in;
      r.stream = s.id();
      auto h = rt.enqueue(r);
      checks.push_back([&s, h, rank, size, type] {
        h->wait(std::chrono::seconds(120));
        std::vector<unsigned char> got = s.read(*h->output());
        size_t first = 0;  // rows of the ranks before this one: 1001 split as evenly as can be
        for (int r = 0; r < rank; ++r) first += (1001 / size + (r < 1001 % size ? 1 : 0)) * 4;
        for (size_t i = 0; i < h->output()->numel(); ++i)
          REQUIRE(loadValue(type, got.data(), i) ==
                      expectedReduction(type, ReduceOp::kSum, size, first + i, 40),
                  "reducescatter " << dataTypeName(type) << " element " << i);
      });
    }
    s.release();
    for (auto& c : checks) c();
  }
}

void adasumOfCudaTensors(Runtime& rt, int rank, int size, int gpu, int ranks_per_host) {
  GatedStream s(gpu);
  s.hold();
  struct Case {
    DataType type;
    double tolerance;
    int salt;
    std::shared_ptr<CudaTensor> tensor;
    std::shared_ptr<Handle> handle;
  };
  std::vector<Case> cases;
  int salt = 0;
  const std::vector<std::pair<DataType, double>> types = {
      {DataType::kFloat32, 1e-5}, {DataType::kFloat64, 1e-12}, {DataType::kFloat16, 1e-2}};
  for (const auto& [type, tolerance] : types) {
    for (int64_t n : {int64_t{3}, int64_t{4097}}) {  // fused, each keeps its own coefficients
      Case c{type, tolerance, ++salt, nullptr, nullptr};
      c.tensor = s.input(type, {n}, rank, c.salt);
      Request r;
      r.name = "adasum." + std::to_string(c.salt);
      r.input = r.output = c.tensor;
      r.op = ReduceOp::kAdasum;
      r.stream = s.id();
      c.handle = rt.enqueue(r);
      cases.push_back(c);
    }
  }
  s.release();
  for (Case& c : cases) {
    c.handle->wait(std::chrono::seconds(120));
    std::vector<unsigned char> got = s.read(*c.tensor);
    std::vector<AdasumVector> per_rank(static_cast<size_t>(size), AdasumVector(c.tensor->numel()));
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < c.tensor->numel(); ++i)
        per_rank[static_cast<size_t>(r)][i] = inputValue(c.type, r, i, c.salt);
    }
    const AdasumVector want = adasumOfHosts(per_rank, static_cast<size_t>(ranks_per_host));
    for (size_t i = 0; i < c.tensor->numel(); ++i) {
      const double value = loadValue(c.type, got.data(), i);
      REQUIRE(std::fabs(value - want[i]) <= c.tolerance * std::max(1.0, std::fabs(want[i])),
              "Adasum " << dataTypeName(c.type) << " of " << c.tensor->numel() << " element " << i
                        << ": " << value << ", expected " << want[i]);
    }
  }
}

void runGpuRanks(const Settings& settings, const GpuRankBody& body, const GpuRanks& layout) {
  RankSpec spec;
  spec.size = layout.ranks;
  spec.hosts = layout.hosts;
  spec.timeout_seconds = 240;
  runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    body(*rt, ctx.rank, ctx.size, layout.gpu_per_rank ? ctx.rank : 0);
  });
}

}  // namespace ronde::testing
