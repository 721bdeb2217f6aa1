// DistributedOptimizer and the broadcasts of parameters and optimizer state.
#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_map>

#include "ronde/torch.h"

namespace ronde::libtorch {

struct DistributedOptimizer::Slot {
  std::string name;
  torch::Tensor param;
  torch::Tensor accumulated;  // this step's gradient so far (local passes summed)
  int passes = 0;
  TorchHandle handle;
  unsigned hook = 0;
};

DistributedOptimizer::DistributedOptimizer(Runtime& runtime, torch::optim::Optimizer& optimizer,
                                           const NamedTensors& named_parameters,
                                           DistributedOptimizerOptions options)
    : collectives_(runtime), optimizer_(optimizer), options_(options) {
  if (options_.backward_passes_per_step < 1) {
    throw Error(ErrorCode::kInvalidArgument, "backward_passes_per_step must be at least 1");
  }
  if (options_.gradient_predivide_factor != 1.0 && options_.op != ReduceOp::kAverage) {
    throw Error(ErrorCode::kInvalidArgument,
                "gradient_predivide_factor is supported only with ReduceOp::kAverage");
  }
  std::unordered_map<const void*, std::string> names;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : named_parameters) {
    if (!seen.insert(name).second) {
      throw makeError(ErrorCode::kInvalidArgument,
                      "parameter names must be unique; found a duplicate: ", name);
    }
    names[tensor.unsafeGetTensorImpl()] = name;
  }
  for (auto& group : optimizer_.param_groups()) {
    for (auto& param : group.params()) {
      auto found = names.find(param.unsafeGetTensorImpl());
      if (found == names.end()) {
        throw makeError(ErrorCode::kInvalidArgument, "a parameter of the optimizer (shape ",
                        param.sizes(), ") is missing from named_parameters");
      }
      if (!param.requires_grad()) continue;
      auto slot = std::make_unique<Slot>();
      slot->name = "grad." + found->second;
      slot->param = param;
      slots_.push_back(std::move(slot));
    }
  }
  // One rank: nothing to average, the wrapped optimizer works alone.
  if (runtime.size() == 1) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i]->hook = slots_[i]->param.register_hook(
        [this, i](const torch::Tensor& grad) { onGradient(i, grad); });
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  if (collectives_.runtime().size() == 1) return;
  for (auto& slot : slots_) {
    if (slot->handle.valid()) {
      try {
        slot->handle.wait();  // the request writes into our buffer: let it finish
      } catch (const std::exception&) {
      }
    }
    slot->param.remove_hook(slot->hook);
  }
}

void DistributedOptimizer::onGradient(size_t index, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mutex_);
  Slot& slot = *slots_[index];
  if (slot.handle.valid()) {
    throw Error(ErrorCode::kInvalidArgument,
                "gradients were computed more than backward_passes_per_step times before "
                "step(); raise backward_passes_per_step to accumulate locally");
  }
  torch::NoGradGuard no_grad;
  if (slot.passes == 0) {
    slot.accumulated = grad.detach().clone(at::MemoryFormat::Contiguous);
  } else {
    slot.accumulated.add_(grad.detach());
  }
  synchronized_ = false;
  if (++slot.passes == options_.backward_passes_per_step) submit(slot);
}

void DistributedOptimizer::submit(Slot& slot) {
  Scaling scaling;
  if (options_.op == ReduceOp::kAverage) {
    scaling.prescale = 1.0 / options_.gradient_predivide_factor;
    scaling.postscale = options_.gradient_predivide_factor;
  }
  if (options_.fp16_compression) {
    slot.handle = collectives_.allreduceCompressedAsync_(slot.name, slot.accumulated,
                                                         options_.op, scaling,
                                                         options_.process_set);
  } else {
    slot.handle = collectives_.allreduceAsync_(slot.name, slot.accumulated, options_.op, scaling,
                                               options_.process_set);
  }
}

void DistributedOptimizer::synchronize() {
  if (collectives_.runtime().size() == 1) {
    synchronized_ = true;
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& slot : slots_) {
    if (slot->handle.valid()) continue;
    if (slot->passes == 0) {
      // No gradient here this step (another rank's graph may have used it): send zeros.
      slot->accumulated = torch::zeros_like(slot->param, at::MemoryFormat::Contiguous);
    }
    submit(*slot);
  }
  torch::NoGradGuard no_grad;
  for (auto& slot : slots_) {
    torch::Tensor reduced = slot->handle.wait();
    slot->handle = TorchHandle();
    slot->passes = 0;
    if (slot->param.grad().defined()) {
      slot->param.mutable_grad().copy_(reduced);
    } else {
      slot->param.mutable_grad() = reduced;
    }
    slot->accumulated = torch::Tensor();
  }
  synchronized_ = true;
}

void DistributedOptimizer::step() {
  if (!synchronized_) synchronize();
  optimizer_.step();
  synchronized_ = false;
}

void DistributedOptimizer::zero_grad() { optimizer_.zero_grad(); }

void broadcastParameters(Runtime& runtime, const NamedTensors& tensors, int root) {
  Collectives collectives(runtime);
  std::vector<TorchHandle> handles;
  for (const auto& [name, tensor] : tensors) {
    handles.push_back(collectives.broadcastAsync_("param." + name, tensor, root));
  }
  for (auto& handle : handles) handle.wait();
}

void broadcastOptimizerState(Runtime& runtime, torch::optim::Optimizer& optimizer, int root) {
  // The optimizer's own serialization names state by parameter position, not by address,
  // so root's archive loads on every rank. It leaves the groups' options (lr, momentum, ...)
  // out, so they travel in sub-archives of their own.
  Collectives collectives(runtime);
  bool is_root = runtime.rank() == root;
  std::string bytes;
  if (is_root) {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
      torch::serialize::OutputArchive options(archive.compilation_unit());
      optimizer.param_groups()[i].options().serialize(options);
      archive.write("ronde_group_options/" + std::to_string(i), options);
    }
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  torch::Tensor length = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kInt64);
  collectives.broadcast_("optimizer_state.length", length, root);
  torch::Tensor payload = torch::empty({length.item<int64_t>()}, torch::kUInt8);
  if (is_root) std::copy(bytes.begin(), bytes.end(), payload.data_ptr<uint8_t>());
  collectives.broadcast_("optimizer_state.data", payload, root);
  if (is_root) return;
  bytes.assign(reinterpret_cast<const char*>(payload.data_ptr<uint8_t>()),
               static_cast<size_t>(payload.numel()));
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
  for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
    torch::serialize::InputArchive options;
    archive.read("ronde_group_options/" + std::to_string(i), options);
    optimizer.param_groups()[i].options().serialize(options);
  }
}

}  // namespace ronde::libtorch
