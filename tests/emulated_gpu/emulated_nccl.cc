// NCCL's API for ronde's NCCL backend, on the host (emulated_gpu.h says why). A communicator's
// ranks meet through a TcpStoreServer that ncclGetUniqueId starts (its address is the id) and
// form a ronde host Communicator over TCP; each collective is queued on the caller's stream and
// run there by that Communicator, on the buffers themselves (the emulated device memory is
// host memory). Behaviour ronde relies on is NCCL's:
//   - nonblocking communicators (config.blocking = 0): init and every call return
//     ncclInProgress, and ncclCommGetAsyncError says when the call is in hand;
//   - a group's broadcasts, reduces, sends and receives start together at ncclGroupEnd; sends
//     and receives must pair up, or the group never finishes (on any rank, here);
//   - buffers must be device memory of the communicator's GPU (ncclInvalidArgument);
//   - two ranks on one GPU fail the init with ncclInvalidUsage ("Duplicate GPU detected");
//   - a failed collective (a peer gone: ncclRemoteError) never completes on its stream: the
//     stream is stuck, as behind a real kernel waiting for a peer, until ncclCommAbort;
//   - ncclCommAbort ends what is in flight, and the communicator is gone.
// Types NCCL has and ronde does not (uint32, uint64, float8) are refused for reductions.
#include <nccl.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emulated_gpu.h"
#include "ronde/communicator.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde::emulated_gpu {

struct NcclState {
  // The store behind the unique id, on the rank of this process that made the id: it lives as
  // long as the communicator, as NCCL's bootstrap root lives only until its ranks have met.
  // First, so that it goes after `host`, which may still write to it as it goes.
  std::shared_ptr<TcpStoreServer> id_server;
  int rank = 0;
  int size = 1;
  int device = 0;
  bool blocking = true;
  std::mutex mutex;
  std::condition_variable cv;
  std::shared_ptr<Communicator> host;  // once formed
  std::string last_error;
  std::atomic<ncclResult_t> async{ncclInProgress};
  std::atomic<bool> aborted{false};
  std::mutex run_mutex;  // one collective at a time on `host`

  // The first error sticks, as NCCL's asynchronous error does.
  void setError(ncclResult_t result, const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    const ncclResult_t now = async.load();
    if (now != ncclSuccess && now != ncclInProgress) return;
    last_error = text;
    async.store(result);
  }
  // Until ncclCommAbort: what a kernel does when its peer never comes.
  void hang() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return aborted.load(); });
  }
};

}  // namespace ronde::emulated_gpu

// nccl.h's opaque communicator.
struct ncclComm {
  std::shared_ptr<ronde::emulated_gpu::NcclState> state;
};

namespace ronde::emulated_gpu {
namespace {

constexpr char kIdTag[] = "ronde-emulated-nccl";

// The stores behind the unique ids this process made and no communicator of it has joined yet,
// by nonce (one set per process: processWide).
struct IdServers {
  const pid_t pid = ::getpid();
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<TcpStoreServer>> unclaimed;
};

IdServers& idServers() { return processWide<IdServers>(); }

thread_local std::string init_error;  // ncclGetLastError(nullptr)

struct Pending {
  enum class Kind { kCollective, kSend, kRecv };
  Pending(ncclComm_t comm, cudaStream_t stream, Kind kind = Kind::kCollective)
      : comm(comm), stream(stream), kind(kind) {}
  ncclComm_t comm;
  cudaStream_t stream;
  Kind kind;
  std::function<void(Communicator&, const NcclState&)> run;  // kCollective
  const void* send = nullptr;                                // kSend
  void* recv = nullptr;                                      // kRecv
  size_t bytes = 0;
  int peer = 0;
};

thread_local int group_depth = 0;
thread_local std::vector<Pending> group;

size_t typeBytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

bool rondeType(ncclDataType_t type, DataType* out) {
  switch (type) {
    case ncclInt8: *out = DataType::kInt8; return true;
    case ncclUint8: *out = DataType::kUInt8; return true;
    case ncclInt32: *out = DataType::kInt32; return true;
    case ncclInt64: *out = DataType::kInt64; return true;
    case ncclFloat16: *out = DataType::kFloat16; return true;
    case ncclBfloat16: *out = DataType::kBFloat16; return true;
    case ncclFloat32: *out = DataType::kFloat32; return true;
    case ncclFloat64: *out = DataType::kFloat64; return true;
    default: return false;
  }
}

bool rondeOp(ncclRedOp_t op, ReduceOp* out) {
  switch (op) {
    case ncclSum: *out = ReduceOp::kSum; return true;
    case ncclProd: *out = ReduceOp::kProduct; return true;
    case ncclMax: *out = ReduceOp::kMax; return true;
    case ncclMin: *out = ReduceOp::kMin; return true;
    case ncclAvg: *out = ReduceOp::kAverage; return true;
    default: return false;
  }
}

ncclResult_t refuse(ncclComm_t comm, ncclResult_t result, const std::string& text) {
  if (comm != nullptr && comm->state) {
    std::lock_guard<std::mutex> lock(comm->state->mutex);
    comm->state->last_error = text;
  } else {
    init_error = text;
  }
  return result;
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// Sends and receives of one group, as one exchange among all ranks. Every rank first learns
// who sends what to whom; if any send has no matching receive of the same size, the group
// never finishes, as NCCL's would not.
void exchange(Communicator& host, NcclState& state, const std::vector<Pending>& ops) {
  const auto n = static_cast<size_t>(state.size);
  std::vector<int64_t> mine(2 * n, 0);  // [bytes sent to r..., bytes received from r...]
  std::vector<const void*> from(n, nullptr);
  std::vector<void*> into(n, nullptr);
  for (const Pending& op : ops) {
    const auto peer = static_cast<size_t>(op.peer);
    if (op.kind == Pending::Kind::kSend) {
      if (from[peer] != nullptr) {
        throw makeError(ErrorCode::kInvalidArgument, "two sends to one peer in a group");
      }
      mine[peer] = static_cast<int64_t>(op.bytes);
      from[peer] = op.send;
    } else if (op.kind == Pending::Kind::kRecv) {
      if (into[peer] != nullptr) {
        throw makeError(ErrorCode::kInvalidArgument, "two receives from one peer in a group");
      }
      mine[n + peer] = static_cast<int64_t>(op.bytes);
      into[peer] = op.recv;
    }
  }
  std::vector<int64_t> all(2 * n * n);
  host.allgatherv(mine.data(), all.data(), std::vector<size_t>(n, 2 * n), DataType::kInt64);
  for (size_t s = 0; s < n; ++s) {
    for (size_t r = 0; r < n; ++r) {
      if (all[s * 2 * n + r] != all[r * 2 * n + n + s]) {
        state.hang();  // rank s sends rank r bytes it does not expect (or the other way)
        return;
      }
    }
  }
  std::vector<size_t> send_counts(n), recv_counts(n);
  size_t sent = 0, received = 0;
  for (size_t r = 0; r < n; ++r) {
    send_counts[r] = static_cast<size_t>(mine[r]);
    recv_counts[r] = static_cast<size_t>(mine[n + r]);
    sent += send_counts[r];
    received += recv_counts[r];
  }
  std::vector<unsigned char> out(std::max<size_t>(sent, 1)), in(std::max<size_t>(received, 1));
  for (size_t r = 0, at = 0; r < n; at += send_counts[r], ++r) {
    if (send_counts[r] > 0) std::memcpy(out.data() + at, from[r], send_counts[r]);
  }
  host.alltoallv(out.data(), send_counts, in.data(), recv_counts, DataType::kUInt8);
  for (size_t r = 0, at = 0; r < n; at += recv_counts[r], ++r) {
    if (recv_counts[r] > 0) std::memcpy(into[r], in.data() + at, recv_counts[r]);
  }
}

// Runs one communicator's share of a call or a group, on its stream.
void execute(const std::shared_ptr<NcclState>& state, const std::vector<Pending>& ops) {
  if (state->aborted.load() || state->async.load() != ncclSuccess) {
    state->hang();  // a failed communicator's kernels never finish
    return;
  }
  std::lock_guard<std::mutex> running(state->run_mutex);
  try {
    bool exchanged = false;
    for (const Pending& op : ops) {
      if (op.kind == Pending::Kind::kCollective) {
        op.run(*state->host, *state);
      } else if (!exchanged) {
        exchange(*state->host, *state, ops);
        exchanged = true;
      }
      if (state->aborted.load()) return;
    }
  } catch (const std::exception& error) {
    if (state->aborted.load()) return;  // ncclCommAbort ended it
    const Error* ronde_error = dynamic_cast<const Error*>(&error);
    const bool peer = ronde_error != nullptr && ronde_error->code() == ErrorCode::kPeerLost;
    state->setError(peer ? ncclRemoteError : ncclSystemError,
                    std::string("emulated NCCL (ronde over TCP): ") + error.what());
    state->hang();
  }
}

ncclResult_t launch(std::vector<Pending> ops) {
  const std::shared_ptr<NcclState> state = ops.front().comm->state;
  const cudaStream_t stream = ops.front().stream;
  for (const Pending& op : ops) {
    if (op.stream != stream) {
      return refuse(op.comm, ncclInvalidUsage,
                    "the emulation runs a group's calls of one communicator on one stream");
    }
  }
  if (enqueue(stream, [state, ops = std::move(ops)] { execute(state, ops); }) != cudaSuccess) {
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// Checks what every call shares, then queues it or adds it to the open group.
ncclResult_t submit(Pending op, const char* what) {
  ncclComm_t comm = op.comm;
  if (comm == nullptr || !comm->state) {
    init_error = std::string(what) + ": no communicator";
    return ncclInvalidArgument;
  }
  NcclState& state = *comm->state;
  if (state.aborted.load()) return refuse(comm, ncclInvalidUsage, "the communicator was aborted");
  const ncclResult_t async = state.async.load();
  if (async == ncclInProgress) {
    return refuse(comm, ncclInvalidUsage,
                  std::string(what) + " before the communicator finished its init");
  }
  if (async != ncclSuccess) return async;
  const int stream_device = deviceOf(op.stream);
  if (stream_device != state.device) {
    return refuse(comm, ncclInvalidArgument,
                  std::string(what) + ": the stream is not a stream of GPU " +
                      std::to_string(state.device));
  }
  if (group_depth > 0) {
    group.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Pending> ops;
  ops.push_back(std::move(op));
  const ncclResult_t result = launch(std::move(ops));
  if (result != ncclSuccess) return result;
  return state.blocking ? ncclSuccess : ncclInProgress;
}

// Buffers must be device memory of the communicator's GPU.
ncclResult_t checkBuffer(ncclComm_t comm, const void* p, size_t bytes, const char* what,
                         const char* which) {
  if (bytes == 0 || comm == nullptr || !comm->state) return ncclSuccess;
  const Region region = regionOf(p, bytes);
  if (region.kind == Region::Kind::kDevice && region.device == comm->state->device) {
    return ncclSuccess;
  }
  return refuse(comm, ncclInvalidArgument,
                std::string(what) + ": " + which + " is not " + std::to_string(bytes) +
                    " bytes of device memory on GPU " + std::to_string(comm->state->device));
}

ncclResult_t reductionArguments(ncclComm_t comm, ncclDataType_t type, ncclRedOp_t op,
                                DataType* ronde_type, ReduceOp* ronde_op, const char* what) {
  if (!rondeType(type, ronde_type)) {
    return refuse(comm, ncclInvalidArgument,
                  std::string(what) + ": the emulation reduces no NCCL type " +
                      std::to_string(static_cast<int>(type)));
  }
  if (!rondeOp(op, ronde_op)) {
    return refuse(comm, ncclInvalidArgument, std::string(what) + ": an op the emulation lacks");
  }
  return ncclSuccess;
}

int rankOf(ncclComm_t comm) { return comm != nullptr && comm->state ? comm->state->rank : 0; }
int sizeOf(ncclComm_t comm) { return comm != nullptr && comm->state ? comm->state->size : 1; }

#define RETURN_IF_FAILED(call)                         \
  do {                                                 \
    const ncclResult_t ronde_result_ = (call);         \
    if (ronde_result_ != ncclSuccess) return ronde_result_; \
  } while (0)

// Forms the host communicator, then checks that no two ranks share a GPU. It waits for every
// rank to check in first, polling, so that ncclCommAbort ends an init some rank never joins
// at once (the host communicator's own rendezvous could not be interrupted).
void form(const std::shared_ptr<NcclState>& state, const std::string& host, int port,
          const std::string& nonce) {
  try {
    auto store = std::make_shared<PrefixStore>(makeTcpStore(host, port, "", Duration(60000)),
                                               "emulated-nccl/" + nonce + "/");
    store->add("joined", 1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (store->add("joined", 0) < state->size) {
      if (state->aborted.load()) return;
      if (std::chrono::steady_clock::now() > give_up) {
        state->setError(ncclSystemError, "emulated NCCL init: not every rank came in 2 minutes");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CommOptions options;
    options.rank = state->rank;
    options.size = state->size;
    options.store = store;
    options.transport = TransportKind::kTcp;
    options.backend = CpuOperations::kNative;
    options.timeout = Duration(600000);  // the caller's own deadlines end the waits
    options.start_timeout = Duration(120000);
    options.hierarchical_allreduce = false;
    std::shared_ptr<Communicator> comm = Communicator::create(options);
    char bus_id[32] = {};
    cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), state->device);
    std::vector<char> all(sizeof(bus_id) * static_cast<size_t>(state->size));
    comm->allgatherv(bus_id, all.data(),
                     std::vector<size_t>(static_cast<size_t>(state->size), sizeof(bus_id)),
                     DataType::kUInt8);
    for (int a = 0; a < state->size; ++a) {
      for (int b = a + 1; b < state->size; ++b) {
        if (std::strncmp(&all[a * sizeof(bus_id)], &all[b * sizeof(bus_id)], sizeof(bus_id)) ==
            0) {
          state->setError(ncclInvalidUsage, "Duplicate GPU detected : rank " + std::to_string(a) +
                                                " and rank " + std::to_string(b) +
                                                " both on CUDA device " + bus_id);
          return;
        }
      }
    }
    std::lock_guard<std::mutex> lock(state->mutex);
    if (state->aborted.load()) return;
    state->host = std::move(comm);
    state->async.store(ncclSuccess);
  } catch (const std::exception& error) {
    state->setError(ncclSystemError, std::string("emulated NCCL init: ") + error.what());
  }
}

}  // namespace
}  // namespace ronde::emulated_gpu

using namespace ronde;                // NOLINT: the C API below is global, as NCCL's
using namespace ronde::emulated_gpu;  // NOLINT

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string text;
  if (comm != nullptr && comm->state) {
    std::lock_guard<std::mutex> lock(comm->state->mutex);
    text = comm->state->last_error;
  } else {
    text = init_error;
  }
  return text.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  IdServers& servers = idServers();
  auto server = std::make_shared<TcpStoreServer>("127.0.0.1", 0, "");
  std::random_device random;
  char nonce[17];
  std::snprintf(nonce, sizeof(nonce), "%08x%08x", random(), random());
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "%s 127.0.0.1 %d %s", kIdTag, server->port(),
                nonce);
  std::lock_guard<std::mutex> lock(servers.mutex);
  servers.unclaimed[nonce] = std::move(server);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    init_error = "ncclCommInitRank: bad rank " + std::to_string(rank) + " of " +
                 std::to_string(nranks);
    return ncclInvalidArgument;
  }
  char tag[32] = {}, host[64] = {}, nonce[32] = {};
  int port = 0;
  id.internal[sizeof(id.internal) - 1] = '\0';
  if (std::sscanf(id.internal, "%31s %63s %d %31s", tag, host, &port, nonce) != 4 ||
      std::strcmp(tag, kIdTag) != 0) {
    init_error = "ncclCommInitRank: not an id from this emulation's ncclGetUniqueId";
    return ncclInvalidArgument;
  }
  auto state = std::make_shared<NcclState>();
  state->rank = rank;
  state->size = nranks;
  state->device = currentDevice();
  state->blocking = !(config != nullptr && config->blocking == 0);
  {
    IdServers& servers = idServers();
    std::lock_guard<std::mutex> lock(servers.mutex);
    auto made_here = servers.unclaimed.find(nonce);
    if (made_here != servers.unclaimed.end()) {
      state->id_server = std::move(made_here->second);
      servers.unclaimed.erase(made_here);
    }
  }
  *comm = new ncclComm{state};
  if (state->blocking) {
    form(state, host, port, nonce);
    return state->async.load();
  }
  std::thread([state, h = std::string(host), port, n = std::string(nonce)] {
    form(state, h, port, n);
  }).detach();
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* result) {
  if (comm == nullptr || result == nullptr) return ncclInvalidArgument;
  *result = comm->state->async.load();
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::shared_ptr<NcclState> state = comm->state;
  std::shared_ptr<Communicator> host;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->aborted.store(true);
    host = state->host;
  }
  state->cv.notify_all();
  if (host) host->abort(ErrorCode::kAborted, "ncclCommAbort");
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;  // queued work keeps the state (and its host communicator) until it has run
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) {
    init_error = "ncclGroupEnd without ncclGroupStart";
    return ncclInvalidUsage;
  }
  if (--group_depth > 0) return ncclSuccess;
  std::vector<Pending> calls = std::move(group);
  group.clear();
  bool nonblocking = false;
  std::map<NcclState*, std::vector<Pending>> by_comm;
  std::vector<NcclState*> order;
  for (Pending& call : calls) {
    NcclState* state = call.comm->state.get();
    if (by_comm.find(state) == by_comm.end()) order.push_back(state);
    nonblocking = nonblocking || !state->blocking;
    by_comm[state].push_back(std::move(call));
  }
  for (NcclState* state : order) RETURN_IF_FAILED(launch(std::move(by_comm[state])));
  return nonblocking ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp o;
  RETURN_IF_FAILED(reductionArguments(comm, type, op, &t, &o, "ncclAllReduce"));
  const size_t bytes = count * typeBytes(type);
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclAllReduce", "sendbuff"));
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclAllReduce", "recvbuff"));
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState&) {
    host.allreduce(send, recv, count, t, o, {});
  };
  return submit(std::move(p), "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (root < 0 || root >= sizeOf(comm)) return refuse(comm, ncclInvalidArgument, "bad root");
  const size_t bytes = count * typeBytes(type);
  if (rankOf(comm) == root) {
    RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclBroadcast", "sendbuff"));
  }
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclBroadcast", "recvbuff"));
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState& state) {
    if (state.rank == root && send != recv) std::memmove(recv, send, bytes);
    host.broadcast(recv, bytes, DataType::kUInt8, root);
  };
  return submit(std::move(p), "ncclBroadcast");
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp o;
  RETURN_IF_FAILED(reductionArguments(comm, type, op, &t, &o, "ncclReduce"));
  if (root < 0 || root >= sizeOf(comm)) return refuse(comm, ncclInvalidArgument, "bad root");
  const size_t bytes = count * typeBytes(type);
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclReduce", "sendbuff"));
  if (rankOf(comm) == root) {
    RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclReduce", "recvbuff"));
  }
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState& state) {
    std::vector<unsigned char> reduced(std::max<size_t>(bytes, 1));
    host.allreduce(send, reduced.data(), count, t, o, {});
    if (state.rank == root) std::memcpy(recv, reduced.data(), bytes);
  };
  return submit(std::move(p), "ncclReduce");
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  const auto n = static_cast<size_t>(sizeOf(comm));
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclAllGather", "sendbuff"));
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes * n, "ncclAllGather", "recvbuff"));
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState&) {
    std::vector<unsigned char> copy;
    const void* from = send;
    if (overlaps(send, bytes, recv, bytes * n)) {  // in place: recvbuff + rank * count
      copy.assign(static_cast<const unsigned char*>(send),
                  static_cast<const unsigned char*>(send) + bytes);
      from = copy.data();
    }
    host.allgatherv(from, recv, std::vector<size_t>(n, bytes), DataType::kUInt8);
  };
  return submit(std::move(p), "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  DataType t;
  ReduceOp o;
  RETURN_IF_FAILED(reductionArguments(comm, type, op, &t, &o, "ncclReduceScatter"));
  const size_t bytes = count * typeBytes(type);
  const auto n = static_cast<size_t>(sizeOf(comm));
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes * n, "ncclReduceScatter", "sendbuff"));
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclReduceScatter", "recvbuff"));
  Pending p(comm, stream);
  p.run = [=](Communicator& host, const NcclState&) {
    std::vector<unsigned char> out;
    void* into = recv;
    if (overlaps(send, bytes * n, recv, bytes)) {
      out.resize(std::max<size_t>(bytes, 1));
      into = out.data();
    }
    host.reducescatter(send, into, std::vector<size_t>(n, count), t, o, {});
    if (into != recv) std::memcpy(recv, into, bytes);
  };
  return submit(std::move(p), "ncclReduceScatter");
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  if (peer < 0 || peer >= sizeOf(comm)) return refuse(comm, ncclInvalidArgument, "bad peer");
  const size_t bytes = count * typeBytes(type);
  RETURN_IF_FAILED(checkBuffer(comm, send, bytes, "ncclSend", "sendbuff"));
  Pending p(comm, stream, Pending::Kind::kSend);
  p.send = send;
  p.bytes = bytes;
  p.peer = peer;
  return submit(std::move(p), "ncclSend");
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (peer < 0 || peer >= sizeOf(comm)) return refuse(comm, ncclInvalidArgument, "bad peer");
  const size_t bytes = count * typeBytes(type);
  RETURN_IF_FAILED(checkBuffer(comm, recv, bytes, "ncclRecv", "recvbuff"));
  Pending p(comm, stream, Pending::Kind::kRecv);
  p.recv = recv;
  p.bytes = bytes;
  p.peer = peer;
  return submit(std::move(p), "ncclRecv");
}

}  // extern "C"
