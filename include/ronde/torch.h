// The LibTorch frontend: ronde's collectives on torch::Tensor, a DistributedOptimizer that
// wraps any torch::optim::Optimizer, and the broadcasts that start training from one state.
//
// Every call names the Runtime it runs on (from ronde::Runtime::init()); the runtime knows
// nothing of torch: TorchTensor implements its Tensor interface over a contiguous CPU tensor
// and keeps it alive until the request completes.
//
// Names: every rank must submit a collective under the same name (ranks may submit in any
// order; the runtime negotiates). A name may not be reused while its request is in flight.
//
// Threads: functions may be called from any thread. A TorchHandle is used by one thread.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ronde/runtime.h"

namespace ronde::libtorch {

// The runtime's view of a torch tensor. Throws Error(kInvalidArgument) for a dtype ronde
// does not reduce (complex, quantized) or a non-contiguous tensor.
class TorchTensor : public ronde::Tensor {
 public:
  explicit TorchTensor(torch::Tensor tensor);
  DataType dtype() const override { return type_; }
  std::vector<int64_t> shape() const override;
  size_t numel() const override { return static_cast<size_t>(tensor_.numel()); }
  Device device() const override;
  void* data() override { return tensor_.data_ptr(); }
  const torch::Tensor& tensor() const { return tensor_; }

 private:
  torch::Tensor tensor_;
  DataType type_;
};

DataType toDataType(c10::ScalarType type);

// An asynchronous collective on torch tensors. wait() returns the result (the in-place
// target for in-place calls) and rethrows the request's ronde::Error.
class TorchHandle {
 public:
  TorchHandle() = default;
  bool poll();
  torch::Tensor wait();
  // Alltoall: rows received from each rank (valid after wait()).
  std::vector<int64_t> receivedSplits();
  bool valid() const { return handle_ != nullptr; }

 private:
  friend class Collectives;
  std::shared_ptr<Handle> handle_;
  torch::Tensor result_;      // preallocated output (null: the runtime allocated it)
  torch::Tensor staged_;      // contiguous copy used for a non-contiguous in-place target
  torch::Tensor copy_back_;   // where staged_ goes after completion (converting its dtype)
};

// Collectives on one runtime. Out-of-place calls leave their input untouched; in-place
// calls (trailing underscore) overwrite it.
class Collectives {
 public:
  explicit Collectives(Runtime& runtime) : runtime_(runtime) {}
  Runtime& runtime() { return runtime_; }

  TorchHandle allreduceAsync(const std::string& name, const torch::Tensor& tensor,
                             ReduceOp op = ReduceOp::kAverage, Scaling scaling = {},
                             int process_set = 0);
  TorchHandle allreduceAsync_(const std::string& name, torch::Tensor tensor,
                              ReduceOp op = ReduceOp::kAverage, Scaling scaling = {},
                              int process_set = 0);
  torch::Tensor allreduce(const std::string& name, const torch::Tensor& tensor,
                          ReduceOp op = ReduceOp::kAverage, Scaling scaling = {},
                          int process_set = 0);
  torch::Tensor allreduce_(const std::string& name, torch::Tensor tensor,
                           ReduceOp op = ReduceOp::kAverage, Scaling scaling = {},
                           int process_set = 0);
  // Negotiated and fused as one group; in place.
  std::vector<torch::Tensor> groupedAllreduce_(const std::string& name,
                                               std::vector<torch::Tensor> tensors,
                                               ReduceOp op = ReduceOp::kAverage,
                                               Scaling scaling = {}, int process_set = 0);

  // Concatenates every rank's tensor along the first dimension (which may differ by rank).
  TorchHandle allgatherAsync(const std::string& name, const torch::Tensor& tensor,
                             int process_set = 0);
  torch::Tensor allgather(const std::string& name, const torch::Tensor& tensor,
                          int process_set = 0);

  TorchHandle broadcastAsync(const std::string& name, const torch::Tensor& tensor, int root,
                             int process_set = 0);
  TorchHandle broadcastAsync_(const std::string& name, torch::Tensor tensor, int root,
                              int process_set = 0);
  torch::Tensor broadcast(const std::string& name, const torch::Tensor& tensor, int root,
                          int process_set = 0);
  torch::Tensor broadcast_(const std::string& name, torch::Tensor tensor, int root,
                           int process_set = 0);

  // Sends splits[j] first-dimension rows to rank j (empty: equal parts); returns the
  // gathered rows and how many came from each rank.
  std::pair<torch::Tensor, std::vector<int64_t>> alltoall(const std::string& name,
                                                          const torch::Tensor& tensor,
                                                          std::vector<int64_t> splits = {},
                                                          int process_set = 0);
  // Reduces, then leaves rank r its block of the first dimension.
  torch::Tensor reducescatter(const std::string& name, const torch::Tensor& tensor,
                              ReduceOp op = ReduceOp::kAverage, Scaling scaling = {},
                              int process_set = 0);
  // Blocks until every rank of the set reached it. Its request is named "ronde.barrier" in
  // every set, so ranks agree whatever barriers of other sets they ran before; a second
  // thread's barrier on a set whose barrier is in flight fails at once (kInvalidArgument).
  void barrier(int process_set = 0);

  // fp16 compression for floating-point tensors: sent as float16, restored by wait().
  TorchHandle allreduceCompressedAsync_(const std::string& name, torch::Tensor tensor,
                                        ReduceOp op, Scaling scaling, int process_set);

 private:
  Request request(RequestKind kind, const std::string& name, int process_set);
  // Enqueues `request` on the runtime; a CUDA input's request carries the tensor's current
  // stream (LibTorch's, where it is built with CUDA), so that the runtime waits for the work
  // producing it there and the result is ready there when the handle completes.
  std::shared_ptr<Handle> enqueue(Request request);
  Runtime& runtime_;
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// From module->named_parameters() or named_buffers().
NamedTensors named(const torch::OrderedDict<std::string, torch::Tensor>& tensors);

// Overwrites every tensor in place with root's value (parameters and buffers alike).
void broadcastParameters(Runtime& runtime, const NamedTensors& tensors, int root = 0);

// Makes the optimizer's state (per-parameter buffers and every group's options) root's.
void broadcastOptimizerState(Runtime& runtime, torch::optim::Optimizer& optimizer,
                             int root = 0);

struct DistributedOptimizerOptions {
  ReduceOp op = ReduceOp::kAverage;
  int backward_passes_per_step = 1;     // local accumulation before each allreduce
  double gradient_predivide_factor = 1.0;  // Average: divide by this before the sum
  bool fp16_compression = false;
  int process_set = 0;
};

// Wraps `optimizer` (which must outlive it): a hook on each named parameter starts that
// gradient's allreduce as soon as backward produces it; step() waits for all of them,
// stores the averages in the parameters' .grad and steps the wrapped optimizer.
//
// Every parameter the optimizer updates must be named exactly once, or the constructor
// throws Error(kInvalidArgument). A parameter that got no gradient this step contributes
// zeros, so ranks with different graphs still agree.
class DistributedOptimizer {
 public:
  DistributedOptimizer(Runtime& runtime, torch::optim::Optimizer& optimizer,
                       const NamedTensors& named_parameters,
                       DistributedOptimizerOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Waits for every gradient's allreduce and writes the results into .grad.
  void synchronize();
  // synchronize() (unless already done since the last backward), then the wrapped step.
  void step();
  void zero_grad();
  torch::optim::Optimizer& optimizer() { return optimizer_; }

 private:
  struct Slot;
  void onGradient(size_t index, const torch::Tensor& grad);
  void submit(Slot& slot);

  Collectives collectives_;
  torch::optim::Optimizer& optimizer_;
  DistributedOptimizerOptions options_;
  std::mutex mutex_;  // the hooks run on autograd's threads
  std::vector<std::unique_ptr<Slot>> slots_;
  bool synchronized_ = false;
};

}  // namespace ronde::libtorch
