// The runtime: named, asynchronous collective requests from any thread, negotiated across
// ranks, fused, and executed by one background thread in the same order on every rank.
//
// A frontend (LibTorch, PyTorch) hands the runtime Tensors, and gets a Handle back at once.
// The background thread gathers ready requests every cycle; the coordinator (rank 0 of the
// process set) decides which are ready on every rank and broadcasts one ordered list, so ranks
// may submit in any order. Shapes, dtypes, ops, roots, scale factors and devices are checked
// across ranks: a mismatch fails that request on every rank with a message naming the tensor,
// the ranks and the values. Ready requests of the same kind, dtype, op and scaling are packed
// into one fusion buffer (RONDE_FUSION_THRESHOLD) and reduced with one collective.
//
// Threads: every method may be called from any thread unless it says otherwise. The runtime
// owns its background thread; shutdown() (or the destructor) fails requests still pending with
// Error(kAborted) and joins it. A lost peer fails all pending handles, after which the runtime
// must be shut down; init can then run again in the same process, with a different world too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ronde/communicator.h"
#include "ronde/errors.h"
#include "ronde/settings.h"
#include "ronde/types.h"

namespace ronde {

// Where a tensor's memory lives. CUDA tensors are staged through pinned host memory (or run by
// NCCL): RONDE_GPU_OPERATIONS, docs/gpu.md.
struct Device {
  enum class Kind : uint8_t { kCpu, kCuda } kind = Kind::kCpu;
  int index = -1;
  bool operator==(const Device&) const = default;
};

// The runtime's view of a framework tensor (contiguous). The frontend implements it; the
// runtime keeps the shared_ptr until the request completes, so the memory stays valid.
class Tensor {
 public:
  virtual ~Tensor() = default;
  virtual DataType dtype() const = 0;
  virtual std::vector<int64_t> shape() const = 0;
  virtual Device device() const = 0;
  virtual void* data() = 0;
  // The product of shape(). Virtual so that a tensor that knows it need not build a shape
  // (shape() returns a new vector): enqueue and the executors ask on every request.
  virtual size_t numel() const;
  size_t bytes() const;
};

// A plain host tensor owning its memory: for the C++ API, tests and benchmarks.
class HostTensor : public Tensor {
 public:
  HostTensor(DataType type, std::vector<int64_t> shape);
  DataType dtype() const override { return type_; }
  std::vector<int64_t> shape() const override { return shape_; }
  size_t numel() const override { return numel_; }
  Device device() const override { return {}; }
  void* data() override { return storage_.data(); }
  template <typename T>
  T* as() { return reinterpret_cast<T*>(storage_.data()); }

 private:
  DataType type_;
  std::vector<int64_t> shape_;
  size_t numel_ = 1;
  std::vector<unsigned char> storage_;
};

// Creates an output tensor once its shape is known (after negotiation, for allgather and
// alltoall, whose output size depends on the other ranks).
using OutputAllocator = std::function<std::shared_ptr<Tensor>(const std::vector<int64_t>& shape)>;

enum class RequestKind : uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier,
  kJoin,
};

class Handle;

struct Request {
  RequestKind kind = RequestKind::kAllreduce;
  std::string name;                // unique among in-flight requests of the process set
  std::shared_ptr<Tensor> input;   // null for barrier and join
  std::shared_ptr<Tensor> output;  // may be the input (in place); null: use allocate_output
  OutputAllocator allocate_output; // allgather, alltoall, reducescatter when output is null
  ReduceOp op = ReduceOp::kSum;
  Scaling scaling;
  int root = 0;                    // broadcast
  std::vector<int64_t> splits;     // alltoall: first-dimension rows sent to each rank
  int process_set = 0;             // 0: all ranks
  // CUDA tensors: the cudaStream_t (as an integer; 0 is the legacy default stream) on which the
  // input is produced and the output will be used. enqueue() records an event there: the
  // runtime's copies wait on that event, not on the whole device, and when the handle completes
  // the output is ready on this stream. Ignored for host tensors.
  uintptr_t stream = 0;
  // Called once when the request completes, with its handle, which is then done: wait()
  // returns at once or throws the request's error, output() and result() hold the results.
  // For frontends that must be told rather than wait, such as TensorFlow's asynchronous
  // kernels. It runs on the runtime's thread (or on the thread that shuts the runtime down)
  // with no runtime lock held, so it may submit requests; it must return quickly and never
  // wait for another request, whose completion that thread would otherwise never reach. What
  // it throws is logged and dropped. Until it runs, the request counts as waited on (the
  // framework waits for it) for the deadlock detector, as a thread blocked in wait() does.
  std::function<void(Handle& done)> on_done;
};

// The outcome of one request. wait() rethrows the request's error on this thread.
class Handle {
 public:
  virtual ~Handle() = default;
  virtual bool poll() = 0;
  virtual void wait(Duration timeout = Duration::max()) = 0;
  // After completion: the output tensor (allocated by the runtime when the request had none).
  virtual std::shared_ptr<Tensor> output() = 0;
  // Alltoall: rows received from each rank. Join: {last rank to join}.
  virtual std::vector<int64_t> result() = 0;
};

// Counters since init, cumulative, for tuners and benchmarks. A request is counted (with the
// collective that runs it) by the time its handle completes.
struct RuntimeStats {
  uint64_t cycles = 0;
  uint64_t full_negotiations = 0;  // cycles that gathered every rank's announcements
  uint64_t responses = 0;          // requests decided (run or failed)
  uint64_t cached_responses = 0;   // of which decided by the cache bits alone
  uint64_t collectives = 0;        // collectives run for them (a fusion buffer counts once)
  // Time spent negotiating (the negotiation collectives and the decision) in cycles that
  // decided something: the control-plane cost of the steps, without the idle cycles.
  double negotiation_seconds = 0;
  // The knobs in force (every rank has the same: rank 0's, or the autotuner's choice).
  int64_t fusion_threshold_bytes = 0;
  int64_t fusion_max_tensor_bytes = 0;  // larger tensors skip the fusion buffer; 0: no limit
  double cycle_time_ms = 0;
  bool response_cache = false;
  // The communicator's algorithm knobs in force (Communicator::tuning()), the same on every
  // rank; changed between cycles by the autotuner when the backend is tunable().
  CommTuning communicator_tuning;
};

class Runtime {
 public:
  // Joins the job described by the environment (`ronde run`, mpirun, srun, RONDE_*).
  static std::unique_ptr<Runtime> init();
  // Joins with explicit settings over an existing communicator (tests, embedding).
  static std::unique_ptr<Runtime> init(const Settings& settings, std::unique_ptr<Communicator> comm);
  // The same, with process sets known from the start: they get ids 1, 2, ... in this order.
  // Every rank must pass the same list: a difference is Error(kMismatch) on every rank.
  static std::unique_ptr<Runtime> init(const Settings& settings, std::unique_ptr<Communicator> comm,
                                       const std::vector<std::vector<int>>& process_sets);
  virtual ~Runtime() = default;

  virtual void shutdown() = 0;
  virtual bool isInitialized() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;
  virtual int crossRank() const = 0;
  virtual int crossSize() const = 0;

  // Throws Error(kInvalidArgument) at once for a bad request or a name still in flight.
  virtual std::shared_ptr<Handle> enqueue(Request request) = 0;
  // Negotiated and fused as one: all complete in the same cycle.
  virtual std::vector<std::shared_ptr<Handle>> enqueueGroup(std::vector<Request> requests) = 0;

  // Process sets: collectives over a subset of ranks. Called by all ranks together; returns
  // the id to put in Request::process_set.
  virtual int addProcessSet(std::vector<int> ranks) = 0;
  virtual void removeProcessSet(int id) = 0;
  // The sorted world ranks of set `id` (0: every rank), as registered on this rank;
  // Error(kInvalidArgument) when no set has that id. For frontends that ask at run time
  // (TensorFlow's size and rank ops), so that a graph built earlier sees the set as it is now.
  virtual std::vector<int> processSetRanks(int id) const = 0;

  virtual void startTimeline(const std::string& path, bool mark_cycles) = 0;
  virtual void stopTimeline() = 0;

  // Knobs a tuner may change while running.
  virtual void setFusionThreshold(int64_t bytes) = 0;
  virtual void setCycleTime(double milliseconds) = 0;

  // The communicator the runtime executes on: for rank and host information. Its collectives
  // must not be called while the runtime runs (the background thread uses it every cycle);
  // submit requests instead. Throws Error(kAborted) after shutdown.
  virtual Communicator& communicator() = 0;

  virtual RuntimeStats stats() const { return {}; }
};

}  // namespace ronde
