// The executor's path for CUDA tensors: host staging (RONDE_GPU_OPERATIONS=host), and the
// choice between it and a device communicator (RONDE_GPU_OPERATIONS=nccl,
// device_comm_executor.cc).
//   - allreduce, one tensor: its chunks go device -> pinned host -> collective -> device, the
//     prescale and postscale applied by the host collective;
//   - allreduce, fused: the batched copy kernel packs the tensors into the device fusion buffer
//     with the prescale, the buffer is staged chunk by chunk, and the kernel unpacks it into
//     the outputs with the postscale (and the average's 1/n);
//   - broadcast, one tensor: chunked as the allreduce (receivers copy nothing in);
//   - the rest (allgather, alltoall, reducescatter, fused broadcast, Adasum): the inputs are
//     staged whole into pinned memory, the host collective runs as for host tensors on views of
//     them, and its outputs are copied to the device outputs.
// The copies wait on each request's ready event and end with the outputs ready on its stream.
// A device failure ends the runtime (as a communicator failure does), naming rank and host.
#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "runtime/device_output.h"
#include "runtime/device_staging.h"
#include "runtime/executor.h"

namespace ronde::runtime {
namespace {

using Clock = Timeline::Clock;

// A host tensor over memory it does not own (the pinned staging buffer).
class HostView final : public Tensor {
 public:
  HostView(void* data, DataType type, std::vector<int64_t> shape)
      : data_(data), type_(type), shape_(std::move(shape)) {}
  DataType dtype() const override { return type_; }
  std::vector<int64_t> shape() const override { return shape_; }
  Device device() const override { return {}; }
  void* data() override { return data_; }

 private:
  void* data_;
  DataType type_;
  std::vector<int64_t> shape_;
};

}  // namespace

std::shared_ptr<Tensor> deviceOutput(DeviceOps& ops, LocalRequest& local,
                                     const std::vector<int64_t>& shape, bool in_place_default) {
  Request& request = local.request;
  std::shared_ptr<Tensor> out = request.output;
  if (!out && request.allocate_output) out = request.allocate_output(shape);
  if (!out && in_place_default) out = request.input;
  if (!out) out = ops.newTensor(request.input->dtype(), shape);
  size_t expected = 1;
  for (int64_t d : shape) expected *= static_cast<size_t>(d);
  if (out->dtype() != request.input->dtype() || out->numel() != expected) {
    throw makeError(ErrorCode::kInvalidArgument, "tensor '", local.descriptor.name,
                    "': the output is ", dataTypeName(out->dtype()), " ", formatShape(out->shape()),
                    ", expected ", dataTypeName(request.input->dtype()), " ", formatShape(shape));
  }
  if (!(out->device() == request.input->device())) {
    throw makeError(
        ErrorCode::kInvalidArgument, "tensor '", local.descriptor.name,
        "': the output is not on the input's device (cuda:", request.input->device().index, ")");
  }
  return out;
}

void Executor::runOnDevice(uint8_t kind, std::vector<Part>& parts, std::vector<int64_t>* result) {
  // This rank's device: its first tensor's. A process's fused tensors must share it (one GPU
  // per process, as in Horovod); others fail here and take part with zeros.
  std::optional<Device> device;
  std::vector<LocalRequest*> owners;
  for (Part& p : parts) {
    owners.push_back(p.local);
    if (p.local == nullptr) continue;
    Device mine = p.local->request.input->device();
    if (!device) device = mine;
    if (!(mine == *device)) {
      p.error = std::make_exception_ptr(makeError(
          ErrorCode::kInvalidArgument, "tensor '", p.local->descriptor.name,
          "' is on cuda:", mine.index, " but is fused with tensors on cuda:", device->index,
          ": one process's CUDA tensors must be on one device"));
      p.local = nullptr;
    }
  }
  auto restore = [&] {
    for (size_t i = 0; i < parts.size(); ++i) parts[i].local = owners[i];
  };
  const Descriptor& d = parts[0].response->descriptor();
  const bool adasum = d.op == ReduceOp::kAdasum;
  const bool allreduce = kind == static_cast<uint8_t>(RequestKind::kAllreduce) && !adasum;
  if (device) home_device_ = device;
  Communicator* device_comm = nullptr;
  if (device_.comms != DeviceComms::kOff && devices_ != nullptr) {
    try {
      device_comm = deviceCommunicatorFor(kind, parts, device);  // sets `device` when it runs
    } catch (const Error& e) {
      restore();
      // A peer's failure (kPeerLost) names that peer already; this rank's own says where.
      if (e.code() == ErrorCode::kPeerLost || comm_->aborted()) throw;
      throw makeError(e.code(), comm_->describeRank(comm_->rank()), ": ", e.what());
    } catch (...) {
      restore();
      throw;
    }
  }
  if (!device) {  // joined, or every tensor refused: contribute zeros from the host
    if (allreduce) {
      zerosInChunks(parts);  // the same collectives, chunk for chunk, as the ranks staging
    } else {
      runKind(kind, parts, result);
    }
    restore();
    return;
  }
  if (devices_ == nullptr) {
    restore();
    throw makeError(ErrorCode::kInternal, "the executor has no devices");
  }
  DeviceOps& ops = devices_->ops(*device);
  std::vector<std::shared_ptr<Tensor>> keep_alive;  // host outputs until their copies finish
  try {
    std::set<uintptr_t> streams;
    for (Part& p : parts) {
      if (p.local == nullptr) continue;
      if (p.local->ready) ops.waitReady(*p.local->ready);
      streams.insert(p.local->request.stream);
    }
    if (device_comm != nullptr) {
      runOnDeviceComm(*device_comm, ops, kind, parts, result);
    } else if (allreduce) {
      if (parts.size() == 1) {
        deviceAllreduceSingle(ops, parts[0]);
      } else {
        deviceAllreduceFused(ops, parts);
      }
    } else if (kind == static_cast<uint8_t>(RequestKind::kBroadcast) && parts.size() == 1) {
      deviceBroadcast(ops, parts[0]);
    } else {
      deviceThroughHostViews(ops, kind, parts, result, keep_alive);
    }
    auto deadline = Deadline::after(device_.timeout);
    for (uintptr_t stream : streams) ops.finish(stream, deadline);
  } catch (const Error& e) {
    ops.drain();
    restore();
    // A communicator's failure names whom it lost already.
    if (comm_->aborted() || (device_comm != nullptr && device_comm->aborted())) throw;
    // The other ranks are in (or past) the same collective: the runtime aborts them all.
    throw makeError(e.code(), comm_->describeRank(comm_->rank()), ", cuda:", device->index, ": ",
                    e.what());
  } catch (...) {
    ops.drain();
    restore();
    throw;
  }
  restore();
}

// A rank with no tensor in a staged allreduce (joined) contributes zeros through the same
// chunked collectives as the ranks that stage, with their scaling.
void Executor::zerosInChunks(std::vector<Part>& parts) {
  const Response& first = *parts[0].response;
  const Descriptor& d = first.descriptor();
  const size_t count = elementsOf(parts);
  const size_t element = dataTypeSize(d.dtype);
  const Scaling scaling = parts.size() == 1 ? Scaling{d.prescale, finalScale(first)} : Scaling{};
  unsigned char* zeros = scratch_.sized(count * element + 1);
  std::memset(zeros, 0, count * element);
  const size_t chunk = std::max<size_t>(device_.staging_chunk_bytes / element, 1);
  auto start = Clock::now();
  for (size_t offset = 0; offset < count; offset += chunk) {
    size_t n = std::min(chunk, count - offset);
    comm_->allreduce(zeros + offset * element, zeros + offset * element, n, d.dtype,
                     collectiveOp(d), scaling);
  }
  for (Part& p : parts) span(p, "ALLREDUCE", start);
}

void Executor::deviceAllreduceSingle(DeviceOps& ops, Part& part) {
  const Response& r = *part.response;
  const Descriptor& d = r.descriptor();
  const void* in = nullptr;
  void* out = nullptr;
  if (part.local) {
    try {
      part.output = deviceOutput(ops, *part.local, d.shape, true);
      in = part.local->request.input->data();
      out = part.output->data();
    } catch (...) {
      part.error = std::current_exception();  // takes part with zeros
    }
  }
  StagingContext context{ops, device_.staging_chunk_bytes, Deadline::after(device_.timeout)};
  auto start = Clock::now();
  const Scaling scaling{d.prescale, finalScale(r)};
  runStagedChunks(context, in, out, static_cast<size_t>(d.numel()), dataTypeSize(d.dtype), true,
                  [&](unsigned char* host, size_t n) {
                    comm_->allreduce(host, host, n, d.dtype, collectiveOp(d), scaling);
                  });
  span(part, "ALLREDUCE", start);
}

std::vector<cuda::CopySegment> Executor::packForAllreduce(DeviceOps& ops,
                                                          std::vector<Part>& parts,
                                                          unsigned char* buffer) {
  const Descriptor& d0 = parts[0].response->descriptor();
  const size_t element = dataTypeSize(d0.dtype);
  auto copy_start = Clock::now();
  std::vector<cuda::CopySegment> pack;
  std::vector<cuda::CopySegment> unpack;
  size_t offset = 0;
  for (Part& p : parts) {
    const Descriptor& d = p.response->descriptor();
    const uint64_t count = static_cast<uint64_t>(d.numel());
    unsigned char* slot = buffer + offset * element;
    offset += count;
    bool filled = false;
    if (p.local) {
      try {
        p.output = deviceOutput(ops, *p.local, d.shape, true);
        pack.push_back({p.local->request.input->data(), slot, count});
        unpack.push_back({slot, p.output->data(), count});
        filled = true;
      } catch (...) {
        p.error = std::current_exception();
      }
    }
    if (!filled) ops.zeroOnDevice(DeviceOps::Queue::kIn, slot, count * element);
  }
  ops.copyOnDevice(DeviceOps::Queue::kIn, pack, {d0.dtype, d0.dtype, d0.prescale});
  for (Part& p : parts) span(p, "MEMCPY_IN_FUSION_BUFFER", copy_start);
  return unpack;
}

void Executor::deviceAllreduceFused(DeviceOps& ops, std::vector<Part>& parts) {
  const Response& first = *parts[0].response;
  const Descriptor& d0 = first.descriptor();
  const size_t element = dataTypeSize(d0.dtype);
  // Dense, not 256-byte aligned: padding would be staged and reduced as garbage.
  const size_t total = elementsOf(parts);
  auto* buffer = static_cast<unsigned char*>(ops.deviceBuffer(total * element + 1));
  const std::vector<cuda::CopySegment> unpack = packForAllreduce(ops, parts, buffer);

  StagingContext context{ops, device_.staging_chunk_bytes, Deadline::after(device_.timeout)};
  auto start = Clock::now();
  runStagedChunks(context, buffer, buffer, total, element, true,
                  [&](unsigned char* host, size_t n) {
                    comm_->allreduce(host, host, n, d0.dtype, collectiveOp(d0), Scaling{});
                  });
  for (Part& p : parts) span(p, "ALLREDUCE", start);

  auto out_start = Clock::now();
  ops.copyOnDevice(DeviceOps::Queue::kOut, unpack, {d0.dtype, d0.dtype, finalScale(first)});
  for (Part& p : parts) span(p, "MEMCPY_OUT_FUSION_BUFFER", out_start);
}

void Executor::deviceBroadcast(DeviceOps& ops, Part& part) {
  const Descriptor& d = part.response->descriptor();
  const int root = static_cast<int>(d.root);  // an index in the set: the communicator's rank
  const void* in = nullptr;
  void* out = nullptr;
  if (part.local) {
    try {
      part.output = deviceOutput(ops, *part.local, d.shape, true);
      out = part.output->data();
      if (comm_->rank() == root) {
        in = part.local->request.input->data();
        if (in == out) out = nullptr;  // the root's result is already there
      }
    } catch (...) {
      part.error = std::current_exception();
    }
  }
  StagingContext context{ops, device_.staging_chunk_bytes, Deadline::after(device_.timeout)};
  auto start = Clock::now();
  runStagedChunks(context, in, out, static_cast<size_t>(d.numel()), dataTypeSize(d.dtype), false,
                  [&](unsigned char* host, size_t n) { comm_->broadcast(host, n, d.dtype, root); });
  span(part, "BROADCAST", start);
}

// Runs the host implementation on host stand-ins of this rank's requests: inputs staged into
// pinned memory, outputs in host tensors, then copied to the device outputs.
void Executor::deviceThroughHostViews(DeviceOps& ops, uint8_t kind, std::vector<Part>& parts,
                                      std::vector<int64_t>* result,
                                      std::vector<std::shared_ptr<Tensor>>& keep_alive) {
  StagingContext context{ops, device_.staging_chunk_bytes, Deadline::after(device_.timeout)};
  size_t in_bytes = 0;
  for (Part& p : parts) {
    if (p.local) in_bytes += p.local->request.input->bytes();
  }
  unsigned char* pinned = ops.hostBuffer(in_bytes + 1);
  std::vector<LocalRequest> stand_ins;
  stand_ins.reserve(parts.size());  // no reallocation: parts point into it
  std::vector<LocalRequest*> originals;
  size_t offset = 0;
  for (Part& p : parts) {
    originals.push_back(p.local);
    if (p.local == nullptr) continue;
    Request& real = p.local->request;
    LocalRequest& stand_in = stand_ins.emplace_back(*p.local);
    Request& host = stand_in.request;
    const size_t bytes = real.input->bytes();
    stageToHost(context, pinned + offset, real.input->data(), bytes);
    host.input =
        std::make_shared<HostView>(pinned + offset, real.input->dtype(), real.input->shape());
    offset += bytes;
    if (real.output == real.input) {
      host.output = host.input;
    } else if (real.output) {
      host.output = std::make_shared<HostTensor>(real.output->dtype(), real.output->shape());
    } else {
      host.output = nullptr;
    }
    host.allocate_output = nullptr;  // the host implementation then makes a host tensor
    p.local = &stand_in;
  }

  runKind(kind, parts, result);

  for (size_t i = 0; i < parts.size(); ++i) {
    Part& p = parts[i];
    LocalRequest* stand_in = p.local;
    p.local = originals[i];
    if (p.local == nullptr || p.error || !p.output) continue;
    std::shared_ptr<Tensor> host_out = p.output;
    keep_alive.push_back(host_out);
    Request& real = p.local->request;
    try {
      bool in_place = host_out == stand_in->request.input;
      // The device tensor that takes the result: the input itself where the host result was
      // its stand-in, else the request's output or a new one.
      p.output = in_place ? real.input : deviceOutput(ops, *p.local, host_out->shape(), false);
      stageToDevice(context, p.output->data(), static_cast<unsigned char*>(host_out->data()),
                    host_out->bytes());
    } catch (const Error&) {
      p.error = std::current_exception();
      p.output = nullptr;
    }
  }
}

}  // namespace ronde::runtime
