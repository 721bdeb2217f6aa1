#include "runtime/communicator_set.h"

#include <algorithm>

#include "comm/topology.h"

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

std::optional<CommunicatorSet::DeviceHierarchy> CommunicatorSet::deviceHierarchy(int id,
                                                                                 Device device) {
  auto view = [](const std::optional<Hierarchy>& h) -> std::optional<DeviceHierarchy> {
    if (!h) return std::nullopt;
    return DeviceHierarchy{h->local.get(), h->cross.get()};
  };
  Communicator* host = data(id);
  if (host == nullptr) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = hierarchies_.find(id);
    if (it != hierarchies_.end()) return view(it->second);
  }
  std::vector<std::string> hosts;
  for (int r = 0; r < host->size(); ++r) hosts.push_back(host->host(r));
  const Topology topology = Topology::fromHosts(host->rank(), hosts);
  std::optional<Hierarchy> made;
  if (topology.homogeneous() && topology.crossSize() > 1 && topology.localSize() > 1) {
    const std::vector<int>& local = topology.by_host[static_cast<size_t>(topology.crossRank())];
    std::vector<int> cross;
    for (const std::vector<int>& on_host : topology.by_host)
      cross.push_back(on_host[static_cast<size_t>(topology.localRank())]);
    std::sort(cross.begin(), cross.end());
    // Under names no other group of this set uses: one local group per host, one cross group
    // per local index.
    Hierarchy h;
    h.local_host = host->subCommunicator(local, "hierarchy/local/" +
                                                    std::to_string(topology.crossRank()));
    const std::string device_name = "device";
    h.local = device_factory_ ? device_factory_(*h.local_host, device_name, device)
                              : h.local_host->deviceCommunicator("nccl", device_name, device.index);
    h.cross = host->subCommunicator(cross, "hierarchy/cross/" +
                                               std::to_string(topology.localRank()));
    made = std::move(h);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = hierarchies_[id];
  slot = std::move(made);
  return view(slot);
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
  std::optional<Hierarchy> gone_hierarchy;
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
    auto hierarchy = hierarchies_.find(id);
    if (hierarchy != hierarchies_.end()) {
      gone_hierarchy = std::move(hierarchy->second);
      hierarchies_.erase(hierarchy);
    }
  }
  // Destroyed outside the lock (the device communicators first, they were built beside the
  // others): they drain their queues and close their links.
  gone_hierarchy.reset();
  gone_device.reset();
}

void CommunicatorSet::abortAll(ErrorCode code, const std::string& reason) {
  // The world first: its failure record is the one every communicator reads.
  if (world_) world_->abort(code, reason);
  if (control_) control_->abort(code, reason);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, comm] : sets_) comm->abort(code, reason);
  for (auto& [id, device] : devices_) device.comm->abort(code, reason);
  for (auto& [id, h] : hierarchies_) {
    if (!h) continue;
    for (auto* comm : {h->local_host.get(), h->local.get(), h->cross.get()})
      comm->abort(code, reason);
  }
}

void CommunicatorSet::throwIfAnyAborted() {
  std::vector<Communicator*> all{world_.get(), control_.get()};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, comm] : sets_) all.push_back(comm.get());
    for (auto& [id, device] : devices_) all.push_back(device.comm.get());
    for (auto& [id, h] : hierarchies_) {
      if (h) all.insert(all.end(), {h->local_host.get(), h->local.get(), h->cross.get()});
    }
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
  std::map<int, std::optional<Hierarchy>> hierarchies;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sets.swap(sets_);
    devices.swap(devices_);
    hierarchies.swap(hierarchies_);
  }
  // Before the host communicators whose rendezvous they were built beside.
  for (auto& [id, h] : hierarchies) {
    if (!h) continue;
    h->local.reset();
    h->cross.reset();
    h->local_host.reset();
  }
  devices.clear();
  sets.clear();
  control_.reset();
  world_.reset();
}

}  // namespace ronde::runtime
