// The way in: requests from any thread are checked, described and handed to the background
// thread (enqueue, the hot path of every gradient hook; enqueueGroup; runInternal for the
// runtime's own requests), each name at most once in flight on this rank.
#include "runtime/runtime_impl.h"
#include "runtime/request_validation.h"

namespace ronde::runtime {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void RuntimeImpl::throwUnusable() const {
  if (fatal_) std::rethrow_exception(fatal_);
  throw Error(ErrorCode::kAborted, "the runtime was shut down");
}

LocalRequest RuntimeImpl::prepare(Request request, Clock::time_point now) {
  if (request.kind == RequestKind::kJoin) {
    if (request.name.empty()) request.name = "join";
    if (request.process_set != 0) {
      throw makeError(ErrorCode::kInvalidArgument, "join '", request.name,
                      "': join spans all ranks");
    }
  }
  if (request.kind == RequestKind::kBarrier && request.name.empty()) request.name = "barrier";
  auto members = sets_.ranks(request.process_set);
  if (!members) {
    throw makeError(ErrorCode::kInvalidArgument, "request '", request.name, "': process set ",
                    request.process_set, " does not exist");
  }
  Descriptor d = describeRequest(request, *members, rank_);
  std::shared_ptr<ReadyEvent> ready;
  if (request.input && request.input->device().kind == Device::Kind::kCuda)
    ready = devices_.ops(request.input->device()).markReady(request.stream);
  auto handle = std::make_shared<HandleImpl>(std::move(request.on_done), blocked_threads_);
  return LocalRequest{std::move(request), std::move(d), std::move(handle), now, -1,
                      std::move(ready)};
}

// The hot path of every gradient hook: one request, no vectors, one lookup of the in-flight
// set (submitDescribed is the general form, for groups).
std::shared_ptr<Handle> RuntimeImpl::enqueue(Request request) {
  LocalRequest local = prepare(std::move(request), Clock::now());
  RequestKey key = tensorKey(local.descriptor);
  std::shared_ptr<HandleImpl> handle = local.handle;
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopped_ || shut_down_ || stop_requested_) throwUnusable();
  if (in_flight_.count(key)) {
    // The peers may have accepted theirs (their earlier request already completed): the
    // notice makes the request fail there too, instead of waiting for this rank forever.
    queueNoticeLocked(local.descriptor);
    wakeLocked(lock);
    throwInFlight(local.descriptor, key);
  }
  in_flight_.insert(std::move(key));
  incoming_.push_back(std::move(local));
  wakeLocked(lock);
  return handle;
}

std::vector<std::shared_ptr<Handle>> RuntimeImpl::enqueueGroup(std::vector<Request> requests) {
  if (requests.empty()) return {};
  std::vector<LocalRequest> locals;
  locals.reserve(requests.size());
  auto now = Clock::now();
  const std::string group = requests[0].name;
  const int group_set = requests[0].process_set;
  for (Request& request : requests) {
    if (request.kind == RequestKind::kJoin)
      throw makeError(ErrorCode::kInvalidArgument, "join cannot be grouped");
    if (request.process_set != group_set) {
      throw makeError(ErrorCode::kInvalidArgument, "group '", group,
                      "': all requests of a group belong to one process set");
    }
    LocalRequest& local = locals.emplace_back(prepare(std::move(request), now));
    local.descriptor.group = group;
    local.descriptor.group_size = static_cast<int32_t>(requests.size());
  }
  return submitDescribed(std::move(locals));
}

void RuntimeImpl::throwInFlight(const Descriptor& d, const RequestKey& key) const {
  std::string also =
      key.second == d.name ? "" : " (or its tensor '" + key.second + "' as any kind)";
  throw makeError(ErrorCode::kInvalidArgument, "a request named '", d.name, "'", also,
                  key.first ? " in process set " + std::to_string(key.first) : std::string(),
                  " is already in flight on rank ", rank_);
}

void RuntimeImpl::queueNoticeLocked(const Descriptor& d) {
  LocalRequest notice;
  notice.descriptor = d;
  notice.descriptor.refused = true;
  incoming_.push_back(std::move(notice));
}

void RuntimeImpl::wakeLocked(std::unique_lock<std::mutex>& lock) {
  // Only the first request into a sleeping loop pays for the wake-up.
  const bool wake = sleeping_;
  sleeping_ = false;
  lock.unlock();
  if (wake) wake_.notify_one();
}

std::vector<std::shared_ptr<Handle>> RuntimeImpl::submitDescribed(
    std::vector<LocalRequest> locals) {
  std::vector<std::shared_ptr<Handle>> handles;
  handles.reserve(locals.size());
  // The keys are made before taking the lock, once each.
  std::vector<RequestKey> tensor_keys;
  tensor_keys.reserve(locals.size());
  for (const LocalRequest& r : locals) tensor_keys.push_back(tensorKey(r.descriptor));
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopped_ || shut_down_ || stop_requested_) throwUnusable();
  // Taken one by one, which also finds a name twice in the group; on a refusal the keys
  // taken so far are given back (remade: the moved ones are gone), so nothing was submitted.
  for (size_t i = 0; i < locals.size(); ++i) {
    if (in_flight_.insert(std::move(tensor_keys[i])).second) continue;
    const RequestKey key = tensorKey(locals[i].descriptor);
    bool twice_in_group = false;
    for (size_t j = 0; j < i; ++j) {
      RequestKey member = tensorKey(locals[j].descriptor);
      twice_in_group = twice_in_group || member == key;
      in_flight_.erase(member);
    }
    // Refused because an earlier request is in flight: as for one request, each member's
    // notice takes this rank's turn of its name, so that peers which accepted the group
    // (theirs had completed) fail instead of waiting. A group naming a tensor twice is
    // malformed wherever it is built: no peer waits for it.
    if (!twice_in_group) {
      for (const LocalRequest& member : locals) queueNoticeLocked(member.descriptor);
      wakeLocked(lock);
    }
    throwInFlight(locals[i].descriptor, key);
  }
  for (LocalRequest& local : locals) {
    handles.push_back(local.handle);
    incoming_.push_back(std::move(local));
  }
  wakeLocked(lock);
  return handles;
}

std::vector<int64_t> RuntimeImpl::runInternal(Descriptor d) {
  auto handle = std::make_shared<HandleImpl>(nullptr, blocked_threads_);
  Request request;
  request.kind = RequestKind::kBarrier;
  request.name = d.name;
  std::vector<LocalRequest> one;
  one.push_back(LocalRequest{std::move(request), std::move(d), handle, Clock::now(), -1, nullptr});
  submitDescribed(std::move(one));
  handle->wait(Duration::max());
  return handle->result();
}

}  // namespace ronde::runtime
