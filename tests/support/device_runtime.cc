#include "support/device_runtime.h"

#include <algorithm>
#include <cmath>

#include "comm/work_queue.h"
#include "runtime/runtime_impl.h"
#include "support/reference.h"
#include "support/runtime_harness_require.h"
#include "support/slow_device.h"

namespace ronde::testing {
namespace {

using runtime::HostDeviceTensor;
using runtime::HostMemoryDevice;

// A device communicator as the runtime sees NCCL's, over host memory: every collective goes to
// a host communicator over the same ranks (the stand-in devices' memory is host memory), and is
// counted. Like NCCL it has no int16 reduction (when asked), so that the runtime must stage
// those.
class StandInDeviceCommunicator final : public Communicator {
 public:
  StandInDeviceCommunicator(std::unique_ptr<Communicator> inner, DeviceWorld& world,
                            bool lacks_int16)
      : inner_(std::move(inner)), world_(world), lacks_int16_(lacks_int16) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int localRank() const override { return inner_->localRank(); }
  int localSize() const override { return inner_->localSize(); }
  int crossRank() const override { return inner_->crossRank(); }
  int crossSize() const override { return inner_->crossSize(); }
  const std::string& host(int r) const override { return inner_->host(r); }

  void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                 Scaling scaling) override {
    REQUIRE(supportsReduction(type, op), "the runtime asked the stand-in for a reduction it lacks");
    ++world_.device_collectives;
    inner_->allreduce(in, out, count, type, op, scaling);
  }
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType type) override {
    ++world_.device_collectives;
    inner_->allgatherv(in, out, counts, type);
  }
  void broadcast(void* buffer, size_t count, DataType type, int root) override {
    ++world_.device_collectives;
    inner_->broadcast(buffer, count, type, root);
  }
  void alltoallv(const void* in, const std::vector<size_t>& send_counts, void* out,
                 const std::vector<size_t>& recv_counts, DataType type) override {
    ++world_.device_collectives;
    inner_->alltoallv(in, send_counts, out, recv_counts, type);
  }
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType type,
                     ReduceOp op, Scaling scaling) override {
    REQUIRE(supportsReduction(type, op), "the runtime asked the stand-in for a reduction it lacks");
    ++world_.device_collectives;
    ++world_.device_reducescatters;
    inner_->reducescatter(in, out, counts, type, op, scaling);
  }
  void barrier() override { inner_->barrier(); }
  bool supportsReduction(DataType type, ReduceOp op) const override {
    const bool sixteen_bit_integer = type == DataType::kInt16 || type == DataType::kUInt16;
    return !(lacks_int16_ && sixteen_bit_integer) && inner_->supportsReduction(type, op);
  }

  using Communicator::abort;
  void abort(ErrorCode code, const std::string& reason) override { inner_->abort(code, reason); }
  bool aborted() const override { return inner_->aborted(); }
  std::shared_ptr<Store> store() const override { return inner_->store(); }
  std::string transportName() const override { return "stand-in nccl"; }

 protected:
  std::shared_ptr<Work> enqueue(std::function<void()> fn) override {
    return queue_->submit(std::move(fn));
  }

 private:
  std::unique_ptr<Communicator> inner_;
  DeviceWorld& world_;
  bool lacks_int16_;
  std::unique_ptr<WorkQueue> queue_ = std::make_unique<WorkQueue>();
};

}  // namespace

std::vector<uintptr_t> DeviceWorld::waited() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<uintptr_t> all;
  for (auto* d : devices) {
    auto w = d->waitedStreams();
    all.insert(all.end(), w.begin(), w.end());
  }
  return all;
}

std::vector<uintptr_t> DeviceWorld::finished() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<uintptr_t> all;
  for (auto* d : devices) {
    auto w = d->finishedStreams();
    all.insert(all.end(), w.begin(), w.end());
  }
  return all;
}

uint64_t DeviceWorld::stagingCopies() {
  std::lock_guard<std::mutex> lock(mutex);
  uint64_t copies = 0;
  for (auto* d : devices) copies += d->copies();
  return copies;
}

Settings stagingSettings() {
  Settings s = runtimeTestSettings();
  s.gpu_operations = GpuOperations::kHost;
  s.gpu_staging_chunk_bytes = 4096;
  return s;
}

DeviceRanks slowDeviceRanks() {
  DeviceRanks ranks;
  ranks.options = slowCopies();
  return ranks;
}

void runDeviceRanks(const Settings& settings, const DeviceBody& body, DeviceRanks ranks) {
  RankSpec spec;
  spec.size = ranks.size;
  spec.hosts = ranks.hosts;
  spec.timeout_seconds = 180;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        rt->shutdown();
        rt.reset();
        DeviceWorld world;
        runtime::HostMemoryDeviceOptions mine = ranks.options;
        if (ranks.failing_rank >= 0 && ctx.rank != ranks.failing_rank) mine.fail_at_copy = -1;
        auto factory = [&world, mine](Device device) {
          auto made = std::make_unique<HostMemoryDevice>(device, mine);
          std::lock_guard<std::mutex> lock(world.mutex);
          world.devices.push_back(made.get());
          return made;
        };
        runtime::CommunicatorSet::DeviceFactory device_comms;
        if (ranks.stand_in_device_comms) {
          const bool lacks_int16 = ranks.stand_in_lacks_int16;
          const bool fails = ranks.device_comm_fails_on == ctx.rank;
          device_comms = [&world, lacks_int16, fails](Communicator& host, const std::string& name,
                                                      Device) -> std::unique_ptr<Communicator> {
            if (fails) {
              throw makeError(ErrorCode::kIo, "injected failure forming the device communicator");
            }
            std::vector<int> everyone(static_cast<size_t>(host.size()));
            for (int r = 0; r < host.size(); ++r) everyone[static_cast<size_t>(r)] = r;
            ++world.device_comms_built;
            return std::make_unique<StandInDeviceCommunicator>(host.subCommunicator(everyone, name),
                                                               world, lacks_int16);
          };
        }
        world.runtime = std::make_unique<runtime::RuntimeImpl>(
            settings, ctx.communicator("device", ctx.rank, ctx.size),
            std::vector<std::vector<int>>{}, factory, device_comms);
        body(world, ctx);
        rt = std::move(world.runtime);  // the harness meets the others and shuts it down
        // `world` (and its device pointers) goes now; the runtime, which owns the devices, later.
      });
}

Device deviceOf(const RuntimeContext& ctx) { return {Device::Kind::kCuda, ctx.rank}; }

std::shared_ptr<HostDeviceTensor> deviceTensor(const RuntimeContext& ctx, DataType type,
                                               std::vector<int64_t> shape, int salt) {
  auto t = std::make_shared<HostDeviceTensor>(type, std::move(shape), deviceOf(ctx));
  for (size_t i = 0; i < t->numel(); ++i)
    storeValue(type, t->data(), i, inputValue(type, ctx.rank, i, salt));
  return t;
}


void allreduceEverything(DeviceWorld& world, RuntimeContext& ctx, Submission submission) {
  struct Case {
    DataType type;
    ReduceOp op;
    double pre, post;
    int salt;
    std::shared_ptr<HostDeviceTensor> tensor;
    std::shared_ptr<Handle> handle;
    uintptr_t stream;
  };
  std::vector<Case> cases;
  int salt = 0;
  for (DataType type : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      if (type == DataType::kBool && op == ReduceOp::kAverage) continue;
      if ((type == DataType::kInt16 || type == DataType::kUInt16) && op == ReduceOp::kProduct)
        continue;
      // Two tensors per pair: 2500 elements (several 4 KiB chunks for every dtype) and 7.
      for (int64_t n : {int64_t{2500}, int64_t{7}}) {
        Case c{type, op, 1.0, 1.0, ++salt, nullptr, nullptr, static_cast<uintptr_t>(100 + salt)};
        if (isFloat(type) && (op == ReduceOp::kSum || op == ReduceOp::kAverage)) {
          c.pre = 0.5;
          c.post = 3.0;
        }
        c.tensor = deviceTensor(ctx, type, {n}, c.salt);
        cases.push_back(c);
      }
    }
  }
  auto request = [](const Case& c) {
    Request r;
    r.name = std::string("ar.") + dataTypeName(c.type) + "." + reduceOpName(c.op) + "." +
             std::to_string(c.salt);
    r.input = r.output = c.tensor;
    r.op = c.op;
    r.scaling = {c.pre, c.post};
    r.stream = c.stream;
    return r;
  };
  for (size_t i = 0; i < cases.size(); i += 2) {
    if (submission == Submission::kOneByOne) {
      for (size_t k = i; k < i + 2; ++k)
        cases[k].handle = world.runtime->enqueue(request(cases[k]));
      continue;
    }
    auto handles = world.runtime->enqueueGroup({request(cases[i]), request(cases[i + 1])});
    cases[i].handle = handles[0];
    cases[i + 1].handle = handles[1];
  }
  for (Case& c : cases) {
    c.handle->wait(std::chrono::seconds(60));
    REQUIRE(c.handle->output().get() == c.tensor.get(), "in place");
    for (size_t i = 0; i < c.tensor->numel(); ++i) {
      double want = expectedAllreduce(c.type, c.op, ctx.size, i, c.salt, c.pre, c.post);
      double got = loadValue(c.type, c.tensor->data(), i);
      REQUIRE(got == want, dataTypeName(c.type)
                               << " " << reduceOpName(c.op) << " element " << i << " of "
                               << c.tensor->numel() << ": " << got << ", expected " << want);
    }
  }
  std::vector<uintptr_t> waited = world.waited();
  std::vector<uintptr_t> finished = world.finished();
  for (Case& c : cases) {
    REQUIRE(std::count(waited.begin(), waited.end(), c.stream) == 1,
            "the ready event of stream " << c.stream << " was waited on once");
    REQUIRE(std::count(finished.begin(), finished.end(), c.stream) == 1,
            "stream " << c.stream << " was made to wait for the outputs once");
  }
}

void otherKinds(DeviceWorld& world, RuntimeContext& ctx) {
  const int n = ctx.size;
  const DataType type = DataType::kFloat32;
  std::vector<std::function<void()>> checks;
  // Allgather: rank r gives 700 + r rows of 3.
  for (int k = 0; k < 3; ++k) {
    auto in = deviceTensor(ctx, type, {700 + ctx.rank, 3}, 10 + k);
    Request r;
    r.kind = RequestKind::kAllgather;
    r.name = "ag." + std::to_string(k);
    r.input = in;
    if (k == 1) {
      r.allocate_output = [&ctx, type](const std::vector<int64_t>& shape) {
        return std::make_shared<HostDeviceTensor>(type, shape, deviceOf(ctx));
      };
    }
    r.stream = 7;
    auto h = world.runtime->enqueue(r);
    checks.push_back([h, k, n, type] {
      h->wait(std::chrono::seconds(60));
      auto out = h->output();
      REQUIRE(out->device().kind == Device::Kind::kCuda, "allgather output on the device");
      size_t at = 0;
      for (int src = 0; src < n; ++src) {
        for (size_t i = 0; i < static_cast<size_t>(700 + src) * 3; ++i, ++at) {
          REQUIRE(loadValue(type, out->data(), at) == inputValue(type, src, i, 10 + k),
                  "allgather " << k << " from rank " << src << " element " << i);
        }
      }
      REQUIRE(at == out->numel(), "allgather size");
    });
  }
  // Broadcast from rank 1, in place.
  for (int k = 0; k < 3; ++k) {
    auto t = deviceTensor(ctx, type, {1500 + k}, 20 + k);
    Request r;
    r.kind = RequestKind::kBroadcast;
    r.name = "bc." + std::to_string(k);
    r.input = r.output = t;
    r.root = 1;
    r.stream = 8;
    auto h = world.runtime->enqueue(r);
    checks.push_back([h, t, k, type] {
      h->wait(std::chrono::seconds(60));
      for (size_t i = 0; i < t->numel(); ++i)
        REQUIRE(loadValue(type, t->data(), i) == inputValue(type, 1, i, 20 + k), "broadcast " << k);
    });
  }
  // Broadcast from rank 0 into separate outputs (the root's result is copied there too).
  for (int k = 0; k < 2; ++k) {
    auto in = deviceTensor(ctx, type, {900 + k}, 40 + k);
    auto out =
        std::make_shared<HostDeviceTensor>(type, std::vector<int64_t>{900 + k}, deviceOf(ctx));
    Request r;
    r.kind = RequestKind::kBroadcast;
    r.name = "bc.out." + std::to_string(k);
    r.input = in;
    r.output = out;
    r.root = 0;
    auto h = world.runtime->enqueue(r);
    checks.push_back([h, out, k, type] {
      h->wait(std::chrono::seconds(60));
      for (size_t i = 0; i < out->numel(); ++i) {
        REQUIRE(loadValue(type, out->data(), i) == inputValue(type, 0, i, 40 + k),
                "broadcast into an output " << k << " element " << i);
      }
    });
  }
  // Alltoall: rank r sends r + j + 1 rows of 2 to rank j.
  {
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int j = 0; j < n; ++j) {
      splits.push_back(ctx.rank + j + 1);
      rows += ctx.rank + j + 1;
    }
    auto in =
        std::make_shared<HostDeviceTensor>(type, std::vector<int64_t>{rows, 2}, deviceOf(ctx));
    int64_t at = 0;
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < ctx.rank + j + 1; ++k, ++at) {
        static_cast<float*>(in->data())[2 * at] = static_cast<float*>(in->data())[2 * at + 1] =
            static_cast<float>(100 * ctx.rank + 10 * j + k);
      }
    }
    Request r;
    r.kind = RequestKind::kAlltoall;
    r.name = "a2a";
    r.input = in;
    r.splits = splits;
    auto h = world.runtime->enqueue(r);
    int me = ctx.rank;
    checks.push_back([h, n, me] {
      h->wait(std::chrono::seconds(60));
      const float* out = static_cast<const float*>(h->output()->data());
      REQUIRE(h->output()->device().kind == Device::Kind::kCuda, "alltoall output on the device");
      int64_t at = 0;
      for (int src = 0; src < n; ++src) {
        REQUIRE(h->result()[static_cast<size_t>(src)] == src + me + 1, "rows from " << src);
        for (int k = 0; k < src + me + 1; ++k, ++at)
          REQUIRE(out[2 * at] == 100 * src + 10 * me + k, "alltoall from " << src << " row " << k);
      }
    });
  }
  // Reducescatters (sum, prescale 2) of 1001 rows of 4 and of 7 rows of 3, as one group so
  // that they fuse where fusion is on: the first rows % n ranks get a row more.
  const std::vector<std::pair<int64_t, int64_t>> scattered{{1001, 4}, {7, 3}};
  std::vector<Request> scatters;
  for (size_t k = 0; k < scattered.size(); ++k) {
    Request r;
    r.kind = RequestKind::kReducescatter;
    r.name = "rs." + std::to_string(k);
    r.input = deviceTensor(ctx, type, {scattered[k].first, scattered[k].second},
                           30 + static_cast<int>(k));
    r.scaling = {2.0, 1.0};
    scatters.push_back(r);
  }
  auto scatter_handles = world.runtime->enqueueGroup(scatters);
  for (size_t k = 0; k < scattered.size(); ++k) {
    const auto [rows, cols] = scattered[k];
    checks.push_back([h = scatter_handles[k], n, me = ctx.rank, type, rows, cols, k] {
      h->wait(std::chrono::seconds(60));
      auto out = h->output();
      size_t first_row = 0;
      for (int i = 0; i < me; ++i) first_row += static_cast<size_t>(rows / n + (i < rows % n));
      const auto my_rows = static_cast<size_t>(rows / n + (me < rows % n));
      const auto row = static_cast<size_t>(cols);
      REQUIRE(out->numel() == my_rows * row, "reducescatter " << k << " block size");
      for (size_t i = 0; i < out->numel(); ++i) {
        const double want = 2 * expectedReduction(type, ReduceOp::kSum, n, first_row * row + i,
                                                  30 + static_cast<int>(k));
        REQUIRE(loadValue(type, out->data(), i) == want,
                "reducescatter " << k << " element " << i);
      }
    });
  }
  for (auto& check : checks) check();
}

void averageBesideAJoinedRank(DeviceWorld& world, RuntimeContext& ctx) {
  Request join;
  join.kind = RequestKind::kJoin;
  if (ctx.rank == 1) {
    world.runtime->enqueue(join)->wait(std::chrono::seconds(60));
    return;
  }
  std::vector<std::shared_ptr<HostDeviceTensor>> tensors;
  std::vector<std::shared_ptr<Handle>> handles;
  for (int k = 0; k < 3; ++k) {
    tensors.push_back(deviceTensor(ctx, DataType::kFloat32, {5000 + k}, k));
    Request r;
    r.name = "alone." + std::to_string(k);
    r.input = r.output = tensors.back();
    r.op = ReduceOp::kAverage;
    r.scaling = {2.0, 1.0};
    handles.push_back(world.runtime->enqueue(r));
  }
  for (size_t k = 0; k < 3; ++k) {
    handles[k]->wait(std::chrono::seconds(60));
    for (size_t i = 0; i < tensors[k]->numel(); ++i) {
      double want = 2 * inputValue(DataType::kFloat32, 0, i, static_cast<int>(k)) / 2;
      REQUIRE(loadValue(DataType::kFloat32, tensors[k]->data(), i) == want,
              "tensor " << k << " element " << i << " (2 x + 0) / 2");
    }
  }
  world.runtime->enqueue(join)->wait(std::chrono::seconds(60));
}

}  // namespace ronde::testing
