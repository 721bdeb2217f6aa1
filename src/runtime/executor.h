// Runs a cycle's responses in the plan's order, identically on every rank, each on the data
// communicator of its process set (communicator_set.h): the world's for set 0, the set's own
// for the others, where ranks outside the set skip the response (no work, no bytes). Ranks
// are then the set's: rank i of a set's communicator is its i-th member. A joined rank still
// takes part in the world's allreduces, contributing zeros. Failures of this rank alone (an
// output the allocator refused) still take part in the collective, then fail the handle; a
// communicator failure propagates: it is fatal. CUDA tensors go through host staging
// (device_executor.cc) or, under RONDE_GPU_OPERATIONS=nccl, run on the set's device
// communicator (device_comm_executor.cc); a device failure there is fatal too. Used by the
// background thread only.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "common/huge_page_buffer.h"
#include "ronde/communicator.h"
#include "runtime/communicator_set.h"
#include "runtime/device_set.h"
#include "runtime/fusion_planner.h"
#include "runtime/local_request.h"
#include "runtime/process_sets.h"
#include "runtime/response.h"
#include "runtime/timeline.h"

namespace ronde::runtime {

// The op a response's collective runs: an average is a sum, its division folded into the
// final scale (finalScale), so that every backend needs only the four reductions.
inline ReduceOp collectiveOp(const Descriptor& d) {
  return d.op == ReduceOp::kAverage ? ReduceOp::kSum : d.op;
}

// What the reduced values are multiplied by last: the postscale, over the members for an
// average.
inline double finalScale(const Response& r) {
  const Descriptor& d = r.descriptor();
  double scale = d.postscale;
  if (d.op == ReduceOp::kAverage) scale /= static_cast<double>(r.members.size());
  return scale;
}

class Executor {
 public:
  // The request of this rank for a key, or null when it has none (joined, outside the set).
  using Lookup = std::function<LocalRequest*(const RequestKey&)>;
  // Completes this rank's request: `error` null on success.
  using Finish = std::function<void(const RequestKey&, std::shared_ptr<Tensor> output,
                                    std::vector<int64_t> result, std::exception_ptr error)>;

  Executor(CommunicatorSet& comms, ProcessSets& sets) : comms_(comms), sets_(sets) {}

  void setTimeline(Timeline* timeline) { timeline_ = timeline; }
  // Whether CUDA tensors' collectives run on the process sets' device communicators (NCCL)
  // instead of being staged through host memory.
  enum class DeviceComms {
    kOff,
    // Where every member of the set has a GPU of its own (decided per set, at its first CUDA
    // collective, by all members alike); else staged. RONDE_GPU_OPERATIONS=auto.
    kWhereEachRankHasAGpu,
    // Always; members sharing a GPU are an Error(kConfig) naming them. RONDE_GPU_OPERATIONS=nccl.
    kRequired,
  };
  struct DeviceSettings {
    size_t staging_chunk_bytes = 4 << 20;  // RONDE_GPU_STAGING_CHUNK_BYTES
    Duration timeout = std::chrono::seconds(300);  // the longest wait for a device copy
    DeviceComms comms = DeviceComms::kOff;         // RONDE_GPU_OPERATIONS
    // Allreduces on device communicators across hosts in two levels (NCCL inside each host,
    // host memory across hosts): RONDE_GPU_HIERARCHICAL_ALLREDUCE.
    bool hierarchical_allreduce = false;
  };
  // Where CUDA tensors' device work goes, and how.
  void setDevices(DeviceSet* devices, const DeviceSettings& settings) {
    devices_ = devices;
    device_ = settings;
  }
  // Does nothing where this rank is outside the unit's process set.
  void run(const std::vector<Response>& responses, const ExecutionUnit& unit, const Lookup& lookup,
           const Finish& finish);

 private:
  struct Part {
    const Response* response;
    LocalRequest* local;  // null: this rank joined (it contributes zeros)
    std::shared_ptr<Tensor> output;
    std::exception_ptr error;  // this rank's own failure
  };
  void allreduceSingle(Part& part);
  void allreduceFused(std::vector<Part>& parts);
  void allgather(Part& part);
  void allgatherFused(std::vector<Part>& parts);
  void broadcast(Part& part);
  void broadcastFused(std::vector<Part>& parts);
  void alltoall(Part& part, std::vector<int64_t>* received_rows);
  void reducescatter(Part& part);
  void reducescatterFused(std::vector<Part>& parts);
  // A span of `activity` on the part's timeline row. A collective (an activity without '_':
  // ALLREDUCE, BROADCAST ...) is named after the library that ran it, as Horovod names its
  // nested spans (MPI_ALLREDUCE, NCCL_ALLREDUCE; RONDE_ALLREDUCE for the native backend, where
  // Horovod writes GLOO_): `via` is that communicator, the unit's host communicator if null.
  void span(const Part& part, const char* activity, Timeline::Clock::time_point start,
            const Communicator* via = nullptr);
  // The elements of all the parts' tensors: a fusion buffer's length.
  static size_t elementsOf(const std::vector<Part>& parts);
  void runKind(uint8_t kind, std::vector<Part>& parts, std::vector<int64_t>* result);

  // device_executor.cc: the same collectives on CUDA tensors, staged through host memory.
  void runOnDevice(uint8_t kind, std::vector<Part>& parts, std::vector<int64_t>* result);
  void zerosInChunks(std::vector<Part>& parts);
  void deviceAllreduceSingle(DeviceOps& ops, Part& part);
  void deviceAllreduceFused(DeviceOps& ops, std::vector<Part>& parts);
  // Issues the packing of the parts' inputs, densely and with the prescale, into the device
  // `buffer` on the in-queue (zeros for a part this rank lacks) and returns the segments that
  // unpack the reduced buffer into their outputs.
  std::vector<cuda::CopySegment> packForAllreduce(DeviceOps& ops, std::vector<Part>& parts,
                                                  unsigned char* buffer);
  void deviceBroadcast(DeviceOps& ops, Part& part);
  void deviceThroughHostViews(DeviceOps& ops, uint8_t kind, std::vector<Part>& parts,
                              std::vector<int64_t>* result,
                              std::vector<std::shared_ptr<Tensor>>& keep_alive);

  // device_comm_executor.cc: the same collectives on the set's device communicator.
  // The device communicator a response runs on, or null when it stays on host staging (Adasum,
  // a reduction the communicator lacks). Builds the set's communicator on first use, on this
  // rank's device; parts on another device fail.
  Communicator* deviceCommunicatorFor(uint8_t kind, std::vector<Part>& parts,
                                      std::optional<Device>& device);
  // Whether every member of the unit's set uses a GPU of its own, `mine` being this rank's
  // (collective over the set's data communicator). Under kRequired a shared GPU throws.
  bool everyMemberHasItsOwnGpu(const Response& response, DeviceOps& mine);
  void runOnDeviceComm(Communicator& comm, DeviceOps& ops, uint8_t kind, std::vector<Part>& parts,
                       std::vector<int64_t>* result);
  // The part's device output (now in part.output), or null where this rank has none: it
  // joined, or its output was refused (now in part.error); either way it still takes part.
  void* resultOf(DeviceOps& ops, Part& part, const std::vector<int64_t>& shape,
                 bool in_place_default);
  void deviceCommAllreduce(Communicator& comm, DeviceOps& ops, std::vector<Part>& parts);
  // The reduction of a packed buffer in two levels, in place.
  void deviceHierarchicalAllreduce(const CommunicatorSet::DeviceHierarchy& hierarchy,
                                   DeviceOps& ops, unsigned char* buffer, size_t count,
                                   unsigned char* share, const Descriptor& d);
  void deviceCommBroadcast(Communicator& comm, DeviceOps& ops, std::vector<Part>& parts);
  void deviceCommAllgather(Communicator& comm, DeviceOps& ops, Part& part);
  void deviceCommAllgatherFused(Communicator& comm, DeviceOps& ops, std::vector<Part>& parts);
  void deviceCommAlltoall(Communicator& comm, DeviceOps& ops, Part& part,
                          std::vector<int64_t>* received_rows);
  void deviceCommReducescatter(Communicator& comm, DeviceOps& ops, Part& part);
  void deviceCommReducescatterFused(Communicator& comm, DeviceOps& ops, std::vector<Part>& parts);

  CommunicatorSet& comms_;
  ProcessSets& sets_;
  Communicator* comm_ = nullptr;  // the unit's data communicator, during run()
  Timeline* timeline_ = nullptr;
  DeviceSet* devices_ = nullptr;
  DeviceSettings device_;
  std::set<int> staged_sets_;  // sets whose members share a GPU: staged under kWhereEachRankHasAGpu
  // The device this rank's CUDA tensors were last on: where a rank with none in a response (it
  // joined) takes part in a device communicator's collective.
  std::optional<Device> home_device_;
  // Huge-page backed: the shared-memory allreduce pins the fusion buffer's pages on every call.
  HugePageBuffer fusion_buffer_;
  HugePageBuffer scratch_;
  HugePageBuffer scratch_in_;
};

}  // namespace ronde::runtime
