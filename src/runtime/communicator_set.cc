#include "runtime/communicator_set.h"

#include <algorithm>

namespace ronde::runtime {

CommunicatorSet::CommunicatorSet(std::unique_ptr<Communicator> world) : world_(std::move(world)) {
  std::vector<int> everyone(static_cast<size_t>(world_->size()));
  for (int r = 0; r < world_->size(); ++r) everyone[static_cast<size_t>(r)] = r;
  control_ = world_->subCommunicator(everyone, "control");
}

CommunicatorSet::~CommunicatorSet() { reset(); }

Communicator* CommunicatorSet::data(int id) {
  if (id == 0) return world_.get();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.get();
}

void CommunicatorSet::addSet(int id, const std::vector<int>& ranks) {
  const bool member = std::binary_search(ranks.begin(), ranks.end(), world_->rank());
  if (!member) return;
  // Under a prefix no other set of this generation uses: ids are never reused.
  std::unique_ptr<Communicator> comm = world_->subCommunicator(ranks, "pset/" + std::to_string(id));
  std::lock_guard<std::mutex> lock(mutex_);
  // Every member builds it in the same negotiated cycle, so all start with the same knobs.
  if (data_tuning_ && comm->tunable()) comm->setTuning(*data_tuning_);
  sets_[id] = std::move(comm);
}

Communicator* CommunicatorSet::device(int id, Device device) {
  Communicator* host = data(id);
  if (host == nullptr) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = devices_.find(id);
    if (it != devices_.end()) return it->second.comm.get();
  }
  // Built outside the lock: forming it waits for the other members, and abortAll() must not
  // wait behind that (it aborts the host communicators, whose failure record the device
  // communicator watches while it forms).
  std::unique_ptr<Communicator> comm =
      device_factory_ ? device_factory_(*host, "device", device)
                      : host->deviceCommunicator("nccl", "device", device.index);
  std::lock_guard<std::mutex> lock(mutex_);
  Communicator* made = comm.get();
  devices_[id] = DeviceCommunicator{device, std::move(comm)};
  return made;
}

std::optional<Device> CommunicatorSet::deviceOf(int id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = devices_.find(id);
  if (it == devices_.end()) return std::nullopt;
  return it->second.device;
}

void CommunicatorSet::setDataTuning(const CommTuning& tuning) {
  if (world_->tuning() != tuning) world_->setTuning(tuning);
  std::lock_guard<std::mutex> lock(mutex_);
  data_tuning_ = tuning;
  for (auto& [id, comm] : sets_) {
    if (comm->tunable() && comm->tuning() != tuning) comm->setTuning(tuning);
  }
}

void CommunicatorSet::removeSet(int id) {
  std::unique_ptr<Communicator> gone;
  std::unique_ptr<Communicator> gone_device;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sets_.find(id);
    if (it == sets_.end()) return;
    gone = std::move(it->second);
    sets_.erase(it);
    auto device = devices_.find(id);
    if (device != devices_.end()) {
      gone_device = std::move(device->second.comm);
      devices_.erase(device);
    }
  }
  // Destroyed outside the lock (the device communicator first, it was built beside the other):
  // they drain their queues and close their links.
  gone_device.reset();
}

void CommunicatorSet::abortAll(ErrorCode code, const std::string& reason) {
  // The world first: its failure record is the one every communicator reads.
  if (world_) world_->abort(code, reason);
  if (control_) control_->abort(code, reason);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, comm] : sets_) comm->abort(code, reason);
  for (auto& [id, device] : devices_) device.comm->abort(code, reason);
}

void CommunicatorSet::throwIfAnyAborted() {
  std::vector<Communicator*> all{world_.get(), control_.get()};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, comm] : sets_) all.push_back(comm.get());
    for (auto& [id, device] : devices_) all.push_back(device.comm.get());
  }
  for (Communicator* comm : all) {
    if (comm == nullptr || !comm->aborted()) continue;
    // The contract: every call on an aborted communicator throws Error(kAborted) repeating its
    // first error, which is the message this rank's handles should carry.
    comm->barrier();
    throw Error(ErrorCode::kAborted, "a communicator of the runtime was aborted");
  }
}

void CommunicatorSet::reset() {
  std::map<int, std::unique_ptr<Communicator>> sets;
  std::map<int, DeviceCommunicator> devices;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sets.swap(sets_);
    devices.swap(devices_);
  }
  devices.clear();  // before the host communicators whose rendezvous they were built beside
  sets.clear();
  control_.reset();
  world_.reset();
}

}  // namespace ronde::runtime
