// torch::Tensor <-> ronde::Tensor, and the collectives on torch tensors.
#include "ronde/torch.h"

#if defined(RONDE_TORCH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ronde::libtorch {
namespace {

// The runtime calls the allocator on its own thread, whose current stream is the default one.
// A CUDA output is allocated as if on the caller's current stream at submission instead: torch's
// caching allocator ties memory to the stream it was allocated on, and an output tied to the
// default stream but used on a side stream could be handed out again while that use is queued.
OutputAllocator allocatorLike(const torch::Tensor& like) {
  torch::TensorOptions options = like.options();
#if defined(RONDE_TORCH_CUDA)
  if (like.is_cuda()) {
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(like.device().index());
    return [options, stream](const std::vector<int64_t>& shape) -> std::shared_ptr<ronde::Tensor> {
      const c10::cuda::CUDAStreamGuard on_callers_stream(stream);
      return std::make_shared<TorchTensor>(torch::empty(shape, options));
    };
  }
#endif
  return [options](const std::vector<int64_t>& shape) -> std::shared_ptr<ronde::Tensor> {
    return std::make_shared<TorchTensor>(torch::empty(shape, options));
  };
}

std::shared_ptr<ronde::Tensor> wrap(const torch::Tensor& tensor) {
  return std::make_shared<TorchTensor>(tensor);
}

}  // namespace

DataType toDataType(c10::ScalarType type) {
  switch (type) {
    case torch::kUInt8: return DataType::kUInt8;
    case torch::kInt8: return DataType::kInt8;
    case torch::kInt16: return DataType::kInt16;
    case torch::kInt32: return DataType::kInt32;
    case torch::kInt64: return DataType::kInt64;
    case torch::kFloat16: return DataType::kFloat16;
    case torch::kBFloat16: return DataType::kBFloat16;
    case torch::kFloat32: return DataType::kFloat32;
    case torch::kFloat64: return DataType::kFloat64;
    case torch::kBool: return DataType::kBool;
    default:
      throw makeError(ErrorCode::kInvalidArgument, "ronde does not support tensors of dtype ",
                      c10::toString(type));
  }
}

TorchTensor::TorchTensor(torch::Tensor tensor)
    : tensor_(std::move(tensor)), type_(toDataType(tensor_.scalar_type())) {
  if (!tensor_.is_contiguous()) {
    throw Error(ErrorCode::kInvalidArgument, "ronde needs contiguous tensors");
  }
}

std::vector<int64_t> TorchTensor::shape() const {
  return std::vector<int64_t>(tensor_.sizes().begin(), tensor_.sizes().end());
}

Device TorchTensor::device() const {
  if (tensor_.is_cuda()) return Device{Device::Kind::kCuda, tensor_.device().index()};
  return Device{};
}

bool TorchHandle::poll() { return handle_->poll(); }

torch::Tensor TorchHandle::wait() {
  handle_->wait();
  if (staged_.defined()) {
    copy_back_.copy_(staged_);
    staged_ = torch::Tensor();
  }
  if (result_.defined()) return result_;
  auto output = std::dynamic_pointer_cast<TorchTensor>(handle_->output());
  if (!output) throw Error(ErrorCode::kInternal, "the runtime returned no torch output");
  return output->tensor();
}

std::vector<int64_t> TorchHandle::receivedSplits() { return handle_->result(); }

namespace {

// A CUDA input's current stream (LibTorch built with CUDA); else 0, the legacy default stream
// (a LibTorch without CUDA has no CUDA tensors).
void onCurrentStream(Request& request) {
  auto* input = dynamic_cast<TorchTensor*>(request.input.get());
  if (input == nullptr) return;
#if defined(RONDE_TORCH_CUDA)
  const torch::Tensor& tensor = input->tensor();
  if (tensor.is_cuda()) {
    request.stream = reinterpret_cast<uintptr_t>(
        c10::cuda::getCurrentCUDAStream(tensor.device().index()).stream());
  }
#endif
}

}  // namespace

std::shared_ptr<Handle> Collectives::enqueue(Request request) {
  onCurrentStream(request);
  return runtime_.enqueue(std::move(request));
}

Request Collectives::request(RequestKind kind, const std::string& name, int process_set) {
  Request request;
  request.kind = kind;
  request.name = name;
  request.process_set = process_set;
  return request;
}

TorchHandle Collectives::allreduceAsync(const std::string& name, const torch::Tensor& tensor,
                                        ReduceOp op, Scaling scaling, int process_set) {
  torch::Tensor input = tensor.detach().contiguous();
  TorchHandle handle;
  handle.result_ = torch::empty_like(input);
  Request request = this->request(RequestKind::kAllreduce, name, process_set);
  request.input = wrap(input);
  request.output = wrap(handle.result_);
  request.op = op;
  request.scaling = scaling;
  handle.handle_ = enqueue(std::move(request));
  return handle;
}

TorchHandle Collectives::allreduceAsync_(const std::string& name, torch::Tensor tensor,
                                         ReduceOp op, Scaling scaling, int process_set) {
  TorchHandle handle;
  torch::Tensor target = tensor.detach();
  handle.result_ = tensor;
  if (!target.is_contiguous()) {
    handle.staged_ = target.contiguous();
    handle.copy_back_ = target;
    target = handle.staged_;
  }
  Request request = this->request(RequestKind::kAllreduce, name, process_set);
  request.input = wrap(target);
  request.output = request.input;
  request.op = op;
  request.scaling = scaling;
  handle.handle_ = enqueue(std::move(request));
  return handle;
}

TorchHandle Collectives::allreduceCompressedAsync_(const std::string& name, torch::Tensor tensor,
                                                   ReduceOp op, Scaling scaling,
                                                   int process_set) {
  if (!tensor.is_floating_point() || tensor.scalar_type() == torch::kFloat16) {
    return allreduceAsync_(name, std::move(tensor), op, scaling, process_set);
  }
  TorchHandle handle;
  handle.result_ = tensor;
  handle.copy_back_ = tensor.detach();
  handle.staged_ = tensor.detach().to(torch::kFloat16).contiguous();
  Request request = this->request(RequestKind::kAllreduce, name, process_set);
  request.input = wrap(handle.staged_);
  request.output = request.input;
  request.op = op;
  request.scaling = scaling;
  handle.handle_ = enqueue(std::move(request));
  return handle;
}

torch::Tensor Collectives::allreduce(const std::string& name, const torch::Tensor& tensor,
                                     ReduceOp op, Scaling scaling, int process_set) {
  return allreduceAsync(name, tensor, op, scaling, process_set).wait();
}

torch::Tensor Collectives::allreduce_(const std::string& name, torch::Tensor tensor,
                                      ReduceOp op, Scaling scaling, int process_set) {
  return allreduceAsync_(name, std::move(tensor), op, scaling, process_set).wait();
}

std::vector<torch::Tensor> Collectives::groupedAllreduce_(const std::string& name,
                                                          std::vector<torch::Tensor> tensors,
                                                          ReduceOp op, Scaling scaling,
                                                          int process_set) {
  std::vector<Request> requests;
  std::vector<torch::Tensor> staged;
  for (size_t i = 0; i < tensors.size(); ++i) {
    staged.push_back(tensors[i].detach().contiguous());
    Request request =
        this->request(RequestKind::kAllreduce, name + "." + std::to_string(i), process_set);
    request.input = wrap(staged.back());
    request.output = request.input;
    request.op = op;
    request.scaling = scaling;
    onCurrentStream(request);
    requests.push_back(std::move(request));
  }
  auto handles = runtime_.enqueueGroup(std::move(requests));
  for (size_t i = 0; i < handles.size(); ++i) {
    handles[i]->wait();
    if (!staged[i].is_same(tensors[i])) tensors[i].detach().copy_(staged[i]);
  }
  return tensors;
}

TorchHandle Collectives::allgatherAsync(const std::string& name, const torch::Tensor& tensor,
                                        int process_set) {
  torch::Tensor input = tensor.detach().contiguous();
  Request request = this->request(RequestKind::kAllgather, name, process_set);
  request.input = wrap(input);
  request.allocate_output = allocatorLike(input);
  TorchHandle handle;
  handle.handle_ = enqueue(std::move(request));
  return handle;
}

torch::Tensor Collectives::allgather(const std::string& name, const torch::Tensor& tensor,
                                     int process_set) {
  return allgatherAsync(name, tensor, process_set).wait();
}

TorchHandle Collectives::broadcastAsync(const std::string& name, const torch::Tensor& tensor,
                                        int root, int process_set) {
  return broadcastAsync_(name, tensor.detach().clone(at::MemoryFormat::Contiguous), root,
                         process_set);
}

TorchHandle Collectives::broadcastAsync_(const std::string& name, torch::Tensor tensor, int root,
                                         int process_set) {
  TorchHandle handle;
  torch::Tensor target = tensor.detach();
  handle.result_ = tensor;
  if (!target.is_contiguous()) {
    handle.staged_ = target.contiguous();
    handle.copy_back_ = target;
    target = handle.staged_;
  }
  Request request = this->request(RequestKind::kBroadcast, name, process_set);
  request.input = wrap(target);
  request.output = request.input;
  request.root = root;
  handle.handle_ = enqueue(std::move(request));
  return handle;
}

torch::Tensor Collectives::broadcast(const std::string& name, const torch::Tensor& tensor,
                                     int root, int process_set) {
  return broadcastAsync(name, tensor, root, process_set).wait();
}

torch::Tensor Collectives::broadcast_(const std::string& name, torch::Tensor tensor, int root,
                                      int process_set) {
  return broadcastAsync_(name, std::move(tensor), root, process_set).wait();
}

std::pair<torch::Tensor, std::vector<int64_t>> Collectives::alltoall(
    const std::string& name, const torch::Tensor& tensor, std::vector<int64_t> splits,
    int process_set) {
  torch::Tensor input = tensor.detach().contiguous();
  if (splits.empty()) {
    int ranks = runtime_.size();
    int64_t rows = input.dim() > 0 ? input.size(0) : 0;
    if (process_set != 0 || rows % ranks != 0) {
      throw makeError(ErrorCode::kInvalidArgument, "alltoall ", name,
                      ": give splits unless the first dimension (", rows,
                      ") divides evenly over all ", ranks, " ranks");
    }
    splits.assign(ranks, rows / ranks);
  }
  Request request = this->request(RequestKind::kAlltoall, name, process_set);
  request.input = wrap(input);
  request.allocate_output = allocatorLike(input);
  request.splits = std::move(splits);
  TorchHandle handle;
  handle.handle_ = enqueue(std::move(request));
  torch::Tensor output = handle.wait();
  return {output, handle.receivedSplits()};
}

torch::Tensor Collectives::reducescatter(const std::string& name, const torch::Tensor& tensor,
                                         ReduceOp op, Scaling scaling, int process_set) {
  torch::Tensor input = tensor.detach().contiguous();
  Request request = this->request(RequestKind::kReducescatter, name, process_set);
  request.input = wrap(input);
  request.allocate_output = allocatorLike(input);
  request.op = op;
  request.scaling = scaling;
  TorchHandle handle;
  handle.handle_ = enqueue(std::move(request));
  return handle.wait();
}

void Collectives::barrier(int process_set) {
  // One name per process set (the runtime keys names by set): a per-process number drifted
  // apart between ranks inside and outside a set, and the job stalled. barrier() blocks, so
  // its name never overlaps itself on one thread.
  Request request = this->request(RequestKind::kBarrier, "ronde.barrier", process_set);
  enqueue(std::move(request))->wait();
}

NamedTensors named(const torch::OrderedDict<std::string, torch::Tensor>& tensors) {
  NamedTensors result;
  for (const auto& item : tensors) result.emplace_back(item.key(), item.value());
  return result;
}

}  // namespace ronde::libtorch
