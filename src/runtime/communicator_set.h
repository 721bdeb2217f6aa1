// The runtime's communicators, all built from the world communicator it was given:
//   - control: a communicator of its own over every rank (store prefix control/) for the
//     per-cycle negotiation (cache bits, announcements, knobs), so that those small messages
//     never queue behind a collective's data on the same links or shm slots;
//   - world data: the given communicator, for process set 0 (and join, which spans the world);
//   - one data communicator per process set this rank belongs to (store prefix pset/<id>/),
//     over the members only: a rank outside a set does no work and moves no bytes for it;
//   - under RONDE_GPU_OPERATIONS=nccl, beside a set's data communicator, a device communicator
//     (NCCL) for its CUDA tensors, on one GPU of this rank, built when the set's first CUDA
//     collective runs (store prefix <the set's>/device/).
// They share the world's failure record, so whichever fails first is what every rank reports;
// abortAll() ends them together.
//
// Threads: the background thread builds, uses and drops them; abortAll() may be called from
// any thread (the liveness monitor, a user's abort) while it does.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ronde/communicator.h"
#include "ronde/runtime.h"

namespace ronde::runtime {

class CommunicatorSet {
 public:
  // Builds the control communicator beside `world` (collective over the world).
  explicit CommunicatorSet(std::unique_ptr<Communicator> world);
  ~CommunicatorSet();
  CommunicatorSet(const CommunicatorSet&) = delete;
  CommunicatorSet& operator=(const CommunicatorSet&) = delete;

  Communicator& world() { return *world_; }
  Communicator& control() { return *control_; }
  // The data communicator of process set `id` (world for 0); null when this rank is not a
  // member (or the set is unknown).
  Communicator* data(int id);

  // Builds the data communicator of a new set: collective over `ranks` (sorted world ranks)
  // alone. A rank outside the set only records that it has none.
  void addSet(int id, const std::vector<int>& ranks);
  void removeSet(int id);
  // Builds a set's device communicator over the same ranks as `host` (its data communicator),
  // under the store prefix `name`, for buffers on `device`. The default is
  // host.deviceCommunicator("nccl", ...); the CPU tests give a host communicator standing in.
  using DeviceFactory = std::function<std::unique_ptr<Communicator>(
      Communicator& host, const std::string& name, Device device)>;
  void setDeviceFactory(DeviceFactory factory) { device_factory_ = std::move(factory); }
  // The device communicator of set `id`, built on `device` when the set has none yet. The build
  // is collective over the set's members: the executor asks at the same response on each (the
  // plan is the same everywhere). Null when this rank is not a member. Background thread only.
  Communicator* device(int id, Device device);
  // The device that set `id`'s device communicator was built on; none before it was built.
  std::optional<Device> deviceOf(int id);
  // The two levels of set `id`'s hierarchical CUDA allreduce, built when first asked (by every
  // member at the same response, as device()): a device communicator over the members on this
  // rank's host, and a host communicator over the members of every host that have this rank's
  // index on theirs. None when this rank is not a member, when the set's hosts have unequal
  // rank counts, or when one level would be a single rank (one host, one rank per host).
  struct DeviceHierarchy {
    Communicator* local;  // device, this host's members
    Communicator* cross;  // host memory, one member per host
  };
  std::optional<DeviceHierarchy> deviceHierarchy(int id, Device device);

  // Applies the communicator knobs to every data communicator of this rank, and to sets
  // built later. The control communicator keeps its own: it moves only small messages.
  void setDataTuning(const CommTuning& tuning);

  // Aborts every communicator with `reason` (the first abort of each keeps its own reason).
  void abortAll(ErrorCode code, const std::string& reason);
  // Throws the error of the first communicator found aborted (e.g. by a user's
  // communicator().abort()), so that the background thread ends all of them.
  void throwIfAnyAborted();
  // Destroys every communicator (the world last); afterwards only hasWorld() may be asked.
  void reset();
  bool hasWorld() const { return world_ != nullptr; }

 private:
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<Communicator> control_;
  std::mutex mutex_;                                   // guards sets_ against abortAll()
  std::map<int, std::unique_ptr<Communicator>> sets_;  // guarded by mutex_; this rank's sets
  std::optional<CommTuning> data_tuning_;  // set by setDataTuning; guarded by mutex_
  struct DeviceCommunicator {
    Device device;
    std::unique_ptr<Communicator> comm;
  };
  std::map<int, DeviceCommunicator> devices_;  // guarded by mutex_; by set id
  struct Hierarchy {
    std::unique_ptr<Communicator> local_host;  // what the local device communicator was built on
    std::unique_ptr<Communicator> local;
    std::unique_ptr<Communicator> cross;
  };
  std::map<int, std::optional<Hierarchy>> hierarchies_;  // guarded by mutex_; none: flat only
  DeviceFactory device_factory_;
};

}  // namespace ronde::runtime
