#include "collective_kernel.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "ronde/shared_runtime.h"
#include "tf_tensor.h"

namespace ronde::tensorflow_ops {
namespace tf = ::tensorflow;
namespace {

// A double carried exactly through a string attribute: TensorFlow's float attributes are
// 32-bit, and ronde scales in double precision as its other frontends do.
double parseScale(tf::OpKernelConstruction* construction, const char* attribute) {
  std::string text;
  if (!construction->GetAttr(attribute, &text).ok()) return 1.0;  // kinds without scaling
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    construction->CtxFailure(
        __FILE__, __LINE__,
        tf::errors::InvalidArgument(attribute, " is not a number: '", text, "'"));
    return 1.0;
  }
  return value;
}

// One op's requests in flight: done() is called once, after the last of them completed.
class Completion {
 public:
  Completion(tf::OpKernelContext* context, tf::AsyncOpKernel::DoneCallback done, size_t members,
             std::function<absl::Status(Handle&, size_t)> after)
      : context_(context), done_(std::move(done)), remaining_(members), after_(std::move(after)) {}

  void memberDone(Handle& handle, size_t member) {
    absl::Status status;
    try {
      handle.wait(Duration::zero());  // done: returns, or throws the request's error
      if (after_) status = after_(handle, member);
    } catch (...) {
      status = statusOf(std::current_exception());
    }
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (first_failure_.ok()) first_failure_ = std::move(status);
    }
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_failure_.ok()) context_->SetStatus(first_failure_);
    }
    done_();
  }

 private:
  tf::OpKernelContext* context_;
  tf::AsyncOpKernel::DoneCallback done_;
  std::atomic<size_t> remaining_;
  std::function<absl::Status(Handle&, size_t)> after_;
  std::mutex mutex_;
  absl::Status first_failure_;  // guarded by mutex_
};

}  // namespace

CollectiveKernel::CollectiveKernel(tf::OpKernelConstruction* construction)
    : tf::AsyncOpKernel(construction) {
  OP_REQUIRES_OK(construction, construction->GetAttr("tensor_name", &name_));
  OP_REQUIRES_OK(construction, construction->GetAttr("process_set_id", &process_set_));
  int op = 0;
  if (construction->GetAttr("reduce_op", &op).ok()) {
    OP_REQUIRES(construction, op >= 0 && op <= static_cast<int>(ReduceOp::kAdasum),
                tf::errors::InvalidArgument("unknown reduction op code ", op));
    op_ = static_cast<ReduceOp>(op);
  }
  scaling_.prescale = parseScale(construction, "prescale_factor");
  scaling_.postscale = parseScale(construction, "postscale_factor");
}

Request CollectiveKernel::request(RequestKind kind) const {
  Request r;
  r.kind = kind;
  r.name = name_;
  r.process_set = process_set_;
  return r;
}

Request CollectiveKernel::member(RequestKind kind, size_t index) const {
  Request r = request(kind);
  r.name.append(".").append(std::to_string(index));
  return r;
}

void CollectiveKernel::reduction(Request& r) const {
  r.op = op_;
  r.scaling = scaling_;
}

void CollectiveKernel::submit(tf::OpKernelContext* context, DoneCallback done,
                              std::vector<Request> requests, AfterMember after) const {
  if (requests.empty()) {
    done();
    return;
  }
  try {
    std::shared_ptr<Runtime> runtime = shared_runtime::get();
    auto completion =
        std::make_shared<Completion>(context, done, requests.size(), std::move(after));
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i].on_done = [completion, i](Handle& handle) { completion->memberDone(handle, i); };
    }
    // Refused requests never complete (their callbacks are dropped unrun): the catch below
    // then ends the op.
    if (requests.size() == 1) {
      runtime->enqueue(std::move(requests[0]));
    } else {
      runtime->enqueueGroup(std::move(requests));
    }
  } catch (...) {
    context->SetStatus(statusOf(std::current_exception()));
    done();
  }
}

OutputAllocator CollectiveKernel::outputAllocator(tf::OpKernelContext* context, int index) {
  return [context, index](const std::vector<int64_t>& shape) -> std::shared_ptr<Tensor> {
    tf::TensorShape tf_shape;
    absl::Status status = tf::TensorShape::BuildTensorShape(shape, &tf_shape);
    tf::Tensor* output = nullptr;
    if (status.ok()) status = context->allocate_output(index, tf_shape, &output);
    if (!status.ok()) {
      throw Error(ErrorCode::kIo, "allocating output " + std::to_string(index) + ": " +
                                      std::string(status.message()));
    }
    return std::make_shared<TfTensor>(*output);
  };
}

absl::Status CollectiveKernel::sameShapeOutput(tf::OpKernelContext* context, int index, bool copy,
                                               tf::Tensor** output) {
  const tf::Tensor& input = context->input(index);
  int forwarded = -1;
  absl::Status status =
      context->forward_input_or_allocate_output({index}, index, input.shape(), output, &forwarded);
  if (!status.ok() || forwarded == index || !copy) return status;
  const auto bytes = input.tensor_data();
  if (!bytes.empty())
    std::memcpy(const_cast<char*>((*output)->tensor_data().data()), bytes.data(), bytes.size());
  return status;
}

}  // namespace ronde::tensorflow_ops
