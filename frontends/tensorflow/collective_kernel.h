// What every kernel of ronde.tensorflow shares: the attributes that name its request
// (tensor_name, process_set_id), the reduction attributes of the reducing kinds, and the
// submission of one request or a group whose completion calls the op's done() once.
//
// Threads: ComputeAsync runs on a TensorFlow thread and only submits; the requests complete on
// the runtime's thread, which allocates outputs whose size only the collective knows
// (OpKernelContext::allocate_output; the context lives until done() is called) and calls done().
// No kernel blocks a TensorFlow thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ronde/runtime.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace ronde::tensorflow_ops {

class CollectiveKernel : public ::tensorflow::AsyncOpKernel {
 public:
  explicit CollectiveKernel(::tensorflow::OpKernelConstruction* construction);

 protected:
  // What a member's success leaves to do before done() (an output made from its result);
  // runs on the runtime's thread.
  using AfterMember = std::function<absl::Status(Handle& done, size_t member)>;

  // A request of `kind` named by the op's tensor_name (a group's member i: "<name>.<i>") in
  // its process set.
  Request request(RequestKind kind) const;
  Request member(RequestKind kind, size_t index) const;
  // Adds the op's reduce_op, prescale_factor and postscale_factor to `r`.
  void reduction(Request& r) const;
  int processSet() const { return process_set_; }

  // Submits `requests`, one alone or several as one group, and calls `done` once they all
  // completed, with the first failure's status (or once, at once, if the runtime refuses them).
  void submit(::tensorflow::OpKernelContext* context, DoneCallback done,
              std::vector<Request> requests, AfterMember after = nullptr) const;

  // An output allocator for output `index` of `context`, called on the runtime's thread.
  static OutputAllocator outputAllocator(::tensorflow::OpKernelContext* context, int index);

  // Output `index` shaped as input `index`: the input's own buffer where TensorFlow lets the
  // kernel reuse it, else a new one (holding a copy of the input when `copy`).
  static absl::Status sameShapeOutput(::tensorflow::OpKernelContext* context, int index, bool copy,
                                      ::tensorflow::Tensor** output);

 private:
  std::string name_;
  int process_set_ = 0;
  ReduceOp op_ = ReduceOp::kSum;
  Scaling scaling_;
};

}  // namespace ronde::tensorflow_ops
