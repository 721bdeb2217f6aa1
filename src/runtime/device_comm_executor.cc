// The executor's path for CUDA tensors on a process set's device communicator
// (RONDE_GPU_OPERATIONS=nccl): the collectives run on the device buffers themselves, on the
// communicator's own stream, with no copy through host memory.
//   - allreduce, one tensor: from the input straight into the output, the communicator applying
//     the prescale and the postscale (and the average's 1/n);
//   - allreduce, fused: the batched copy kernel packs the tensors into the device fusion buffer
//     with the prescale, one collective reduces it in place, the kernel unpacks it with the
//     postscale; with RONDE_GPU_HIERARCHICAL_ALLREDUCE across hosts, every allreduce is packed
//     so, and reduced in two levels (deviceHierarchicalAllreduce);
//   - broadcast: into the output (the root copies its input there first); fused: packed on the
//     root, broadcast, unpacked everywhere;
//   - allgather: into the output; fused: each rank's tensors packed into its block, gathered,
//     and unpacked into every output by one launch;
//   - alltoall, reducescatter: into the output; reducescatter fused: each member's share of
//     every tensor packed into its block with the prescale by one launch, reduce-scattered,
//     and this rank's block unpacked into the outputs by another.
// A rank with no tensor in a response (it joined) takes part with zeros or nothing, on the
// device the set's communicator is on. Adasum and reductions the communicator lacks (NCCL:
// int16) stay on host staging; the choice depends on the response alone, so every rank makes
// the same one.
//
// Ordering: the requests' ready events and the packing go to the in-queue, and the host waits
// for it before the collective, whose call returns once its stream is done; the out-queue then
// unpacks, and finish() (device_executor.cc) orders the callers' streams after it.
#include "common/logging.h"
#include "runtime/collective_layout.h"
#include "runtime/device_output.h"
#include "runtime/device_set.h"
#include "runtime/device_staging.h"
#include "runtime/executor.h"

namespace ronde::runtime {
namespace {

using Clock = Timeline::Clock;

bool isKind(uint8_t kind, RequestKind k) { return kind == static_cast<uint8_t>(k); }

cuda::CopyConversion rawCopy(DataType type) { return {type, type, 1.0}; }

}  // namespace

Communicator* Executor::deviceCommunicatorFor(uint8_t kind, std::vector<Part>& parts,
                                              std::optional<Device>& device) {
  const Response& first = *parts[0].response;
  const Descriptor& d = first.descriptor();
  const bool reduces =
      isKind(kind, RequestKind::kAllreduce) || isKind(kind, RequestKind::kReducescatter);
  if (reduces && d.op == ReduceOp::kAdasum) return nullptr;  // the runtime's own algorithm
  const int set = first.key.first;
  // One device communicator per set, on one GPU of this rank: tensors on another fail (and
  // their rank takes part with zeros), as tensors fused across devices do.
  const std::optional<Device> built = comms_.deviceOf(set);
  if (built) {
    for (Part& p : parts) {
      if (p.local == nullptr) continue;
      const Device mine = p.local->request.input->device();
      if (mine == *built) continue;
      p.error = std::make_exception_ptr(makeError(
          ErrorCode::kInvalidArgument, "tensor '", p.local->descriptor.name, "' is on cuda:",
          mine.index, " but process set ", set, "'s NCCL communicator on this rank is on cuda:",
          built->index, ": one process's CUDA tensors must be on one device"));
      p.local = nullptr;
    }
  }
  if (!built && staged_sets_.count(set) > 0) return nullptr;
  Device where = built          ? *built
                 : device       ? *device
                 : home_device_ ? *home_device_
                                : DeviceSet::fallbackDevice(comms_.world().localRank());
  if (!built && !everyMemberHasItsOwnGpu(first, devices_->ops(where))) {
    staged_sets_.insert(set);
    return nullptr;
  }
  Communicator* comm = comms_.device(set, where);
  if (comm == nullptr) return nullptr;
  if (reduces && !comm->supportsReduction(d.dtype, collectiveOp(d))) return nullptr;
  device = where;
  return comm;
}

bool Executor::everyMemberHasItsOwnGpu(const Response& response, DeviceOps& mine) {
  constexpr size_t kIdentityBytes = 64;
  std::string identity = mine.identity();
  identity.resize(kIdentityBytes, '\0');
  const size_t members = static_cast<size_t>(comm_->size());
  std::string all(kIdentityBytes * members, '\0');
  comm_->allgather(identity.data(), all.data(), kIdentityBytes, DataType::kUInt8);
  auto gpuOf = [&](size_t i) {
    std::string id = all.substr(i * kIdentityBytes, kIdentityBytes);
    return id.substr(0, id.find('\0'));
  };
  for (size_t i = 0; i < members; ++i) {
    for (size_t j = i + 1; j < members; ++j) {
      const int a = static_cast<int>(i);
      const int b = static_cast<int>(j);
      if (comm_->host(a) != comm_->host(b) || gpuOf(i) != gpuOf(j)) continue;
      const std::string clash = "ranks " + std::to_string(response.members[i]) + " and " +
                                std::to_string(response.members[j]) + " on host " +
                                comm_->host(a) + " share one GPU (" + gpuOf(i) + ")";
      if (device_.comms == DeviceComms::kRequired) {
        throw makeError(ErrorCode::kConfig, "RONDE_GPU_OPERATIONS=nccl: ", clash,
                        ", and NCCL needs a GPU per rank: give each rank its own (e.g. "
                        "torch.cuda.set_device(local_rank)), or set RONDE_GPU_OPERATIONS=host");
      }
      if (comm_->rank() == 0) {
        log(LogLevel::kInfo, "process set ", response.key.first, ": ", clash,
            ", so its CUDA tensors are staged through host memory instead of NCCL");
      }
      return false;
    }
  }
  return true;
}

void* Executor::resultOf(DeviceOps& ops, Part& part, const std::vector<int64_t>& shape,
                          bool in_place_default) {
  if (part.local == nullptr) return nullptr;
  try {
    part.output = deviceOutput(ops, *part.local, shape, in_place_default);
    return part.output->data();
  } catch (...) {
    part.error = std::current_exception();
    return nullptr;
  }
}

void Executor::runOnDeviceComm(Communicator& comm, DeviceOps& ops, uint8_t kind,
                               std::vector<Part>& parts, std::vector<int64_t>* result) {
  if (isKind(kind, RequestKind::kAllreduce)) {
    deviceCommAllreduce(comm, ops, parts);
  } else if (isKind(kind, RequestKind::kBroadcast)) {
    deviceCommBroadcast(comm, ops, parts);
  } else if (isKind(kind, RequestKind::kAllgather)) {
    if (parts.size() == 1) {
      deviceCommAllgather(comm, ops, parts[0]);
    } else {
      deviceCommAllgatherFused(comm, ops, parts);
    }
  } else if (isKind(kind, RequestKind::kAlltoall)) {
    deviceCommAlltoall(comm, ops, parts[0], result);
  } else if (isKind(kind, RequestKind::kReducescatter)) {
    if (parts.size() == 1) {
      deviceCommReducescatter(comm, ops, parts[0]);
    } else {
      deviceCommReducescatterFused(comm, ops, parts);
    }
  } else {
    throw makeError(ErrorCode::kInternal, "no device collective for request kind ", int(kind));
  }
}

void Executor::deviceCommAllreduce(Communicator& comm, DeviceOps& ops, std::vector<Part>& parts) {
  const Response& first = *parts[0].response;
  const Descriptor& d0 = first.descriptor();
  const size_t element = dataTypeSize(d0.dtype);
  const Deadline deadline = Deadline::after(device_.timeout);
  std::optional<CommunicatorSet::DeviceHierarchy> hierarchy;
  if (device_.hierarchical_allreduce) {
    hierarchy = comms_.deviceHierarchy(first.key.first, ops.device());
  }
  if (parts.size() == 1 && !hierarchy) {
    Part& p = parts[0];
    const size_t count = static_cast<size_t>(d0.numel());
    const void* in = p.local ? p.local->request.input->data() : nullptr;
    void* out = resultOf(ops, p, d0.shape, true);
    if (out == nullptr) {  // takes part with zeros
      out = ops.deviceBuffer(count * element + 1);
      ops.zeroOnDevice(DeviceOps::Queue::kIn, out, count * element);
      in = out;
    }
    ops.synchronize(DeviceOps::Queue::kIn, deadline);
    auto start = Clock::now();
    comm.allreduce(in, out, count, d0.dtype, collectiveOp(d0),
                   Scaling{d0.prescale, finalScale(first)});
    span(p, "ALLREDUCE", start, &comm);
    return;
  }

  const size_t total = elementsOf(parts);
  // Dense: the whole buffer is reduced, so padding between tensors would be work for nothing.
  // The hierarchical reduction keeps this rank's share of it behind it.
  const size_t share = hierarchy ? total / static_cast<size_t>(hierarchy->local->size()) + 1 : 0;
  auto* buffer = static_cast<unsigned char*>(ops.deviceBuffer((total + share) * element + 1));
  const std::vector<cuda::CopySegment> unpack = packForAllreduce(ops, parts, buffer);
  ops.synchronize(DeviceOps::Queue::kIn, deadline);

  auto start = Clock::now();
  if (hierarchy) {
    deviceHierarchicalAllreduce(*hierarchy, ops, buffer, total, buffer + total * element, d0);
  } else {
    comm.allreduce(buffer, buffer, total, d0.dtype, collectiveOp(d0), Scaling{});
  }
  for (Part& p : parts) span(p, "ALLREDUCE", start, &comm);

  auto out_start = Clock::now();
  ops.copyOnDevice(DeviceOps::Queue::kOut, unpack, {d0.dtype, d0.dtype, finalScale(first)});
  for (Part& p : parts) span(p, "MEMCPY_OUT_FUSION_BUFFER", out_start);
}

// Horovod's hierarchical allreduce: the ranks of each host reduce-scatter the buffer on the
// device (NCCL over NVLink or PCIe), each rank's share crosses the hosts through host memory on
// the host backend (staged in chunks, so that the copies overlap the network), and the ranks of
// each host allgather the reduced shares. A rank's share is the same size on every host (the
// hosts run equal rank counts), so the ranks meeting across hosts run equal chunks.
void Executor::deviceHierarchicalAllreduce(const CommunicatorSet::DeviceHierarchy& hierarchy,
                                           DeviceOps& ops, unsigned char* buffer, size_t count,
                                           unsigned char* share, const Descriptor& d) {
  Communicator& local = *hierarchy.local;
  const size_t ranks = static_cast<size_t>(local.size());
  std::vector<size_t> shares(ranks);
  for (size_t i = 0; i < ranks; ++i) shares[i] = count / ranks + (i < count % ranks ? 1 : 0);
  const size_t mine = shares[static_cast<size_t>(local.rank())];
  const ReduceOp op = collectiveOp(d);
  local.reducescatter(buffer, share, shares, d.dtype, op, Scaling{});
  StagingContext context{ops, device_.staging_chunk_bytes, Deadline::after(device_.timeout)};
  runStagedChunks(context, share, share, mine, dataTypeSize(d.dtype), true,
                  [&](unsigned char* host, size_t n) {
                    hierarchy.cross->allreduce(host, host, n, d.dtype, op, Scaling{});
                  });
  // The device communicator runs on a stream of its own: the shares must be back first.
  ops.synchronize(DeviceOps::Queue::kOut, Deadline::after(device_.timeout));
  local.allgatherv(share, buffer, shares, d.dtype);
}

void Executor::deviceCommBroadcast(Communicator& comm, DeviceOps& ops, std::vector<Part>& parts) {
  const Descriptor& d0 = parts[0].response->descriptor();
  const int root = static_cast<int>(d0.root);  // an index in the set: the communicator's rank
  const bool is_root = comm.rank() == root;
  const size_t element = dataTypeSize(d0.dtype);
  const Deadline deadline = Deadline::after(device_.timeout);
  const auto in_queue = DeviceOps::Queue::kIn;
  if (parts.size() == 1) {
    Part& p = parts[0];
    const size_t count = static_cast<size_t>(d0.numel());
    const void* in = p.local ? p.local->request.input->data() : nullptr;
    void* buffer = resultOf(ops, p, d0.shape, true);
    if (buffer == nullptr) buffer = ops.deviceBuffer(count * element + 1);
    if (is_root && in == nullptr) {
      ops.zeroOnDevice(in_queue, buffer, count * element);  // a joined root sends zeros
    } else if (is_root && in != buffer) {
      ops.copyOnDevice(in_queue, {{in, buffer, count}}, rawCopy(d0.dtype));
    }
    ops.synchronize(in_queue, deadline);
    auto start = Clock::now();
    comm.broadcast(buffer, count, d0.dtype, root);
    span(p, "BROADCAST", start, &comm);
    return;
  }

  const size_t total = elementsOf(parts);
  auto* buffer = static_cast<unsigned char*>(ops.deviceBuffer(total * element + 1));
  auto copy_start = Clock::now();
  std::vector<cuda::CopySegment> pack;
  std::vector<cuda::CopySegment> unpack;
  size_t offset = 0;
  for (Part& p : parts) {
    const Descriptor& d = p.response->descriptor();
    const size_t count = static_cast<size_t>(d.numel());
    unsigned char* slot = buffer + offset * element;
    offset += count;
    if (p.local == nullptr) {
      if (is_root) ops.zeroOnDevice(in_queue, slot, count * element);  // a joined root
      continue;
    }
    const void* in = p.local->request.input->data();
    if (is_root) pack.push_back({in, slot, count});
    try {
      p.output = deviceOutput(ops, *p.local, d.shape, true);
      // The root's result is already where its input is.
      if (!is_root || p.output->data() != in) unpack.push_back({slot, p.output->data(), count});
    } catch (...) {
      p.error = std::current_exception();
    }
  }
  ops.copyOnDevice(in_queue, pack, rawCopy(d0.dtype));
  ops.synchronize(in_queue, deadline);
  if (is_root) {
    for (Part& p : parts) span(p, "MEMCPY_IN_FUSION_BUFFER", copy_start);
  }

  auto start = Clock::now();
  comm.broadcast(buffer, total, d0.dtype, root);
  for (Part& p : parts) span(p, "BROADCAST", start, &comm);

  auto out_start = Clock::now();
  ops.copyOnDevice(DeviceOps::Queue::kOut, unpack, rawCopy(d0.dtype));
  for (Part& p : parts) span(p, "MEMCPY_OUT_FUSION_BUFFER", out_start);
}

void Executor::deviceCommAllgather(Communicator& comm, DeviceOps& ops, Part& part) {
  const Response& r = *part.response;
  const Descriptor& d = r.descriptor();
  const GatherLayout layout = gatherLayout(r);
  const size_t element = dataTypeSize(d.dtype);
  const size_t total = static_cast<size_t>(layout.rows) * static_cast<size_t>(d.rowElements());
  const void* in = part.local ? part.local->request.input->data() : nullptr;
  void* out = resultOf(ops, part, withFirstDim(d, layout.rows), false);
  if (out == nullptr) out = ops.deviceBuffer(total * element + 1);
  if (in == nullptr) in = out;  // a joined rank gives nothing
  ops.synchronize(DeviceOps::Queue::kIn, Deadline::after(device_.timeout));
  auto start = Clock::now();
  comm.allgatherv(in, out, layout.counts, d.dtype);
  span(part, "ALLGATHER", start, &comm);
}

// Each rank's block of the gathered buffer holds its contributions to every tensor, in plan
// order; tensor k's output is then member 0's piece of k, member 1's, ...
void Executor::deviceCommAllgatherFused(Communicator& comm, DeviceOps& ops,
                                        std::vector<Part>& parts) {
  const Descriptor& d0 = parts[0].response->descriptor();
  const size_t element = dataTypeSize(d0.dtype);
  std::vector<const Response*> responses;
  for (Part& p : parts) responses.push_back(p.response);
  const FusedGatherLayout layout = fusedGatherLayout(responses);
  const size_t members = layout.counts.size();
  const size_t me = static_cast<size_t>(comm.rank());
  // One allocation: this rank's block, then the gathered buffer.
  auto* send = static_cast<unsigned char*>(
      ops.deviceBuffer((layout.counts[me] + layout.total) * element + 1));
  unsigned char* gathered = send + layout.counts[me] * element;

  auto copy_start = Clock::now();
  std::vector<cuda::CopySegment> pack;
  size_t offset = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    Part& p = parts[k];
    const size_t count = layout.elements[k][me];
    if (p.local) {
      pack.push_back({p.local->request.input->data(), send + offset * element, count});
      try {
        p.output = deviceOutput(ops, *p.local,
                                  withFirstDim(p.response->descriptor(), layout.rows[k]), false);
      } catch (...) {
        p.error = std::current_exception();
      }
    }
    offset += count;
  }
  ops.copyOnDevice(DeviceOps::Queue::kIn, pack, rawCopy(d0.dtype));
  ops.synchronize(DeviceOps::Queue::kIn, Deadline::after(device_.timeout));
  for (Part& p : parts) span(p, "MEMCPY_IN_FUSION_BUFFER", copy_start);

  auto start = Clock::now();
  comm.allgatherv(send, gathered, layout.counts, d0.dtype);
  for (Part& p : parts) span(p, "ALLGATHER", start, &comm);

  auto out_start = Clock::now();
  std::vector<size_t> block_start(members, 0);
  for (size_t i = 1; i < members; ++i) block_start[i] = block_start[i - 1] + layout.counts[i - 1];
  std::vector<size_t> within(members, 0);  // how far into each member's block tensor k starts
  std::vector<cuda::CopySegment> unpack;
  for (size_t k = 0; k < parts.size(); ++k) {
    Part& p = parts[k];
    size_t out_offset = 0;
    for (size_t i = 0; i < members; ++i) {
      const size_t n = layout.elements[k][i];
      if (p.local && !p.error && n > 0) {
        unpack.push_back({gathered + (block_start[i] + within[i]) * element,
                          static_cast<unsigned char*>(p.output->data()) + out_offset * element, n});
      }
      out_offset += n;
      within[i] += n;
    }
  }
  ops.copyOnDevice(DeviceOps::Queue::kOut, unpack, rawCopy(d0.dtype));
  for (Part& p : parts) span(p, "MEMCPY_OUT_FUSION_BUFFER", out_start);
}

void Executor::deviceCommAlltoall(Communicator& comm, DeviceOps& ops, Part& part,
                                  std::vector<int64_t>* received_rows) {
  const Response& r = *part.response;
  const Descriptor& d = r.descriptor();
  const AlltoallLayout layout = alltoallLayout(r, comm.rank());
  *received_rows = layout.received_rows;
  const size_t element = dataTypeSize(d.dtype);
  const size_t received =
      static_cast<size_t>(layout.rows) * static_cast<size_t>(d.rowElements()) * element;
  const void* in = part.local ? part.local->request.input->data() : nullptr;
  void* out = resultOf(ops, part, withFirstDim(d, layout.rows), false);
  if (out == nullptr) out = ops.deviceBuffer(received + 1);
  if (in == nullptr) in = out;
  ops.synchronize(DeviceOps::Queue::kIn, Deadline::after(device_.timeout));
  auto start = Clock::now();
  comm.alltoallv(in, layout.send, out, layout.recv, d.dtype);
  span(part, "ALLTOALL", start, &comm);
}

void Executor::deviceCommReducescatter(Communicator& comm, DeviceOps& ops, Part& part) {
  const Response& r = *part.response;
  const Descriptor& d = r.descriptor();
  const ScatterLayout layout = scatterLayout(r, comm.rank());
  const size_t element = dataTypeSize(d.dtype);
  const size_t count = static_cast<size_t>(d.numel());
  const size_t mine = layout.counts[static_cast<size_t>(comm.rank())];
  const void* in = part.local ? part.local->request.input->data() : nullptr;
  void* out = resultOf(ops, part, withFirstDim(d, layout.my_rows), false);
  // Scratch for what this rank lacks: zeros in (a joined rank), somewhere for its block out.
  const bool zeros = in == nullptr;
  auto* scratch = static_cast<unsigned char*>(
      ops.deviceBuffer(((zeros ? count : 0) + (out == nullptr ? mine : 0)) * element + 1));
  if (zeros) {
    ops.zeroOnDevice(DeviceOps::Queue::kIn, scratch, count * element);
    in = scratch;
  }
  if (out == nullptr) out = scratch + (zeros ? count * element : 0);
  ops.synchronize(DeviceOps::Queue::kIn, Deadline::after(device_.timeout));
  auto start = Clock::now();
  comm.reducescatter(in, out, layout.counts, d.dtype, collectiveOp(d),
                     Scaling{d.prescale, finalScale(r)});
  span(part, "REDUCESCATTER", start, &comm);
}

// Member i's block of the device fusion buffer holds its share of every tensor, in plan order,
// packed with the prescale by one kernel launch (zeros from a joined rank); after one
// reducescatter this rank's block holds its share of each tensor, unpacked by a second launch.
void Executor::deviceCommReducescatterFused(Communicator& comm, DeviceOps& ops,
                                            std::vector<Part>& parts) {
  const Response& first = *parts[0].response;
  const Descriptor& d0 = first.descriptor();
  const size_t element = dataTypeSize(d0.dtype);
  std::vector<const Response*> responses;
  for (Part& p : parts) responses.push_back(p.response);
  const size_t me = static_cast<size_t>(comm.rank());
  const FusedScatterLayout layout = fusedScatterLayout(responses, comm.rank());
  // One allocation: the packed inputs, then this rank's reduced block.
  auto* buffer = static_cast<unsigned char*>(
      ops.deviceBuffer((layout.total + layout.counts[me]) * element + 1));
  unsigned char* mine = buffer + layout.total * element;

  auto copy_start = Clock::now();
  for (size_t k = 0; k < parts.size(); ++k) {
    resultOf(ops, parts[k], withFirstDim(parts[k].response->descriptor(), layout.my_rows[k]),
             false);
  }
  std::vector<cuda::CopySegment> pack;
  forEachPackedShare(layout, [&](size_t k, size_t from, size_t at, size_t n) {
    if (n == 0) return;
    unsigned char* slot = buffer + at * element;
    if (parts[k].local) {
      const auto* in = static_cast<const unsigned char*>(parts[k].local->request.input->data());
      pack.push_back({in + from * element, slot, n});
    } else {
      ops.zeroOnDevice(DeviceOps::Queue::kIn, slot, n * element);
    }
  });
  ops.copyOnDevice(DeviceOps::Queue::kIn, pack, {d0.dtype, d0.dtype, d0.prescale});
  ops.synchronize(DeviceOps::Queue::kIn, Deadline::after(device_.timeout));
  for (Part& p : parts) span(p, "MEMCPY_IN_FUSION_BUFFER", copy_start);

  auto start = Clock::now();
  comm.reducescatter(buffer, mine, layout.counts, d0.dtype, collectiveOp(d0),
                     Scaling{1.0, finalScale(first)});
  for (Part& p : parts) span(p, "REDUCESCATTER", start, &comm);

  auto out_start = Clock::now();
  std::vector<cuda::CopySegment> unpack;
  size_t offset = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const size_t n = layout.elements[k][me];
    if (parts[k].local && !parts[k].error && n > 0)
      unpack.push_back({mine + offset * element, parts[k].output->data(), n});
    offset += n;
  }
  ops.copyOnDevice(DeviceOps::Queue::kOut, unpack, rawCopy(d0.dtype));
  for (Part& p : parts) span(p, "MEMCPY_OUT_FUSION_BUFFER", out_start);
}

}  // namespace ronde::runtime
