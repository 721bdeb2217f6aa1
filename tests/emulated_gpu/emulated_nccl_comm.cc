#include "emulated_nccl_comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "ronde/errors.h"

namespace ronde::emulated_gpu {

IdServers& idServers() { return processWide<IdServers>(); }

thread_local std::string init_error;
thread_local int group_depth = 0;
thread_local std::vector<Pending> group;

namespace {

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

}  // namespace

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

ncclResult_t launchCalls(std::vector<Pending> ops) {
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

ncclResult_t submitCall(Pending op, const char* what) {
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
  const ncclResult_t result = launchCalls(std::move(ops));
  if (result != ncclSuccess) return result;
  return state.blocking ? ncclSuccess : ncclInProgress;
}

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

}  // namespace ronde::emulated_gpu
