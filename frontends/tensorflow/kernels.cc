// The CPU kernels of ronde.tensorflow's ops (ops.cc): each builds its requests from the op's
// tensors and attributes and submits them to the process's shared runtime
// (ronde/shared_runtime.h, started by hvd.init()); see collective_kernel.h for the threads.
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "collective_kernel.h"
#include "ronde/shared_runtime.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_tensor.h"

namespace ronde::tensorflow_ops {
namespace {

namespace tf = ::tensorflow;
using DoneCallback = tf::AsyncOpKernel::DoneCallback;

// The request's view of input `index`; a bad dtype fails the op (false).
bool viewOf(tf::OpKernelContext* context, int index, std::shared_ptr<Tensor>* view) {
  try {
    *view = std::make_shared<TfTensor>(context->input(index));
    return true;
  } catch (const Error& e) {
    context->SetStatus(statusOf(e));
    return false;
  }
}

// Allreduce, alone or grouped: output i is input i reduced, in input i's buffer where
// TensorFlow lets the kernel reuse it.
class AllreduceKernel : public CollectiveKernel {
 public:
  explicit AllreduceKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    const int count = context->num_inputs();
    std::vector<Request> requests;
    requests.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      tf::Tensor* output = nullptr;
      OP_REQUIRES_OK_ASYNC(context, sameShapeOutput(context, i, /*copy=*/false, &output), done);
      Request r = grouped() ? member(RequestKind::kAllreduce, static_cast<size_t>(i))
                            : request(RequestKind::kAllreduce);
      reduction(r);
      if (!viewOf(context, i, &r.input)) return done();
      r.output = std::make_shared<TfTensor>(*output);
      requests.push_back(std::move(r));
    }
    submit(context, std::move(done), std::move(requests));
  }

 private:
  bool grouped() const { return type_string() == "RondeGroupedAllreduce"; }
};

// Allgather and reducescatter, alone or grouped: the outputs' first dimension is known only
// once the ranks agree, so the runtime allocates them, on its own thread.
class GatheringKernel : public CollectiveKernel {
 public:
  GatheringKernel(tf::OpKernelConstruction* c, RequestKind kind, bool grouped)
      : CollectiveKernel(c), kind_(kind), grouped_(grouped) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    const int count = context->num_inputs();
    std::vector<Request> requests;
    requests.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      Request r = grouped_ ? member(kind_, static_cast<size_t>(i)) : request(kind_);
      if (kind_ == RequestKind::kReducescatter) reduction(r);
      const tf::Tensor& input = context->input(i);
      try {
        // A scalar is gathered as one row, as the other frontends gather it.
        if (kind_ == RequestKind::kAllgather && input.dims() == 0) {
          r.input = std::make_shared<TfTensor>(input, std::vector<int64_t>{1});
        } else {
          r.input = std::make_shared<TfTensor>(input);
        }
      } catch (const Error& e) {
        context->SetStatus(statusOf(e));
        return done();
      }
      r.allocate_output = outputAllocator(context, i);
      requests.push_back(std::move(r));
    }
    submit(context, std::move(done), std::move(requests));
  }

 private:
  RequestKind kind_;
  bool grouped_;
};

class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root", &root_));
  }

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    tf::Tensor* output = nullptr;
    // In place on the output: the root's values are its input's; the others' are overwritten.
    OP_REQUIRES_OK_ASYNC(context, sameShapeOutput(context, 0, /*copy=*/true, &output), done);
    Request r = request(RequestKind::kBroadcast);
    r.root = root_;
    try {
      r.input = std::make_shared<TfTensor>(*output);
    } catch (const Error& e) {
      context->SetStatus(statusOf(e));
      return done();
    }
    r.output = r.input;
    std::vector<Request> requests;
    requests.push_back(std::move(r));
    submit(context, std::move(done), std::move(requests));
  }

 private:
  int root_ = 0;
};

class AlltoallKernel : public CollectiveKernel {
 public:
  explicit AlltoallKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_size", &set_size_));
  }

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    const tf::Tensor& input = context->input(0);
    const tf::Tensor& splits = context->input(1);
    OP_REQUIRES_ASYNC(context, splits.dims() == 1,
                      tf::errors::InvalidArgument("alltoall: splits must be a vector, not of "
                                                  "shape ",
                                                  splits.shape().DebugString()),
                      done);
    Request r = request(RequestKind::kAlltoall);
    const auto values = splits.flat<int32_t>();
    if (values.size() > 0) {
      r.splits.assign(values.data(), values.data() + values.size());
    } else {
      // No splits: the first dimension in even shares, as the other frontends divide it.
      int64_t members = set_size_;
      if (members == 0) {  // the set as it is now (an elastic world may have re-formed)
        try {
          members = static_cast<int64_t>(shared_runtime::get()->processSetRanks(processSet()).size());
        } catch (const Error& e) {
          context->SetStatus(statusOf(e));
          return done();
        }
      }
      const int64_t rows = input.dims() > 0 ? input.dim_size(0) : 0;
      OP_REQUIRES_ASYNC(
          context, members > 0 && rows % members == 0,
          tf::errors::InvalidArgument("alltoall without splits needs the first dimension (", rows,
                                      ") to be divisible by the number of ranks (", members, ")"),
          done);
      r.splits.assign(static_cast<size_t>(members), rows / members);
    }
    if (!viewOf(context, 0, &r.input)) return done();
    r.allocate_output = outputAllocator(context, 0);
    std::vector<Request> requests;
    requests.push_back(std::move(r));
    // The rows received from each member: the request's result, once it is known.
    submit(context, std::move(done), std::move(requests),
           [context](Handle& handle, size_t) -> absl::Status {
             const std::vector<int64_t> received = handle.result();
             tf::Tensor* out = nullptr;
             TF_RETURN_IF_ERROR(context->allocate_output(
                 1, tf::TensorShape({static_cast<int64_t>(received.size())}), &out));
             auto flat = out->flat<int32_t>();
             for (size_t i = 0; i < received.size(); ++i)
               flat(static_cast<int64_t>(i)) = static_cast<int32_t>(received[i]);
             return absl::OkStatus();
           });
  }

 private:
  int set_size_ = 0;
};

class JoinKernel : public CollectiveKernel {
 public:
  explicit JoinKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    std::vector<Request> requests;
    requests.push_back(request(RequestKind::kJoin));
    submit(context, std::move(done), std::move(requests),
           [context](Handle& handle, size_t) -> absl::Status {
             const std::vector<int64_t> result = handle.result();
             tf::Tensor* out = nullptr;
             TF_RETURN_IF_ERROR(context->allocate_output(0, tf::TensorShape({}), &out));
             out->scalar<int32_t>()() = result.empty() ? -1 : static_cast<int32_t>(result[0]);
             return absl::OkStatus();
           });
  }
};

class BarrierKernel : public CollectiveKernel {
 public:
  explicit BarrierKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    std::vector<Request> requests;
    requests.push_back(request(RequestKind::kBarrier));
    submit(context, std::move(done), std::move(requests));
  }
};

template <RequestKind kKind, bool kGrouped>
class Gathering : public GatheringKernel {
 public:
  explicit Gathering(tf::OpKernelConstruction* c) : GatheringKernel(c, kKind, kGrouped) {}
};

REGISTER_KERNEL_BUILDER(Name("RondeAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("RondeGroupedAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("RondeAllgather").Device(tf::DEVICE_CPU),
                        Gathering<RequestKind::kAllgather, false>);
REGISTER_KERNEL_BUILDER(Name("RondeGroupedAllgather").Device(tf::DEVICE_CPU),
                        Gathering<RequestKind::kAllgather, true>);
REGISTER_KERNEL_BUILDER(Name("RondeReducescatter").Device(tf::DEVICE_CPU),
                        Gathering<RequestKind::kReducescatter, false>);
REGISTER_KERNEL_BUILDER(Name("RondeGroupedReducescatter").Device(tf::DEVICE_CPU),
                        Gathering<RequestKind::kReducescatter, true>);
REGISTER_KERNEL_BUILDER(Name("RondeBroadcast").Device(tf::DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("RondeAlltoall").Device(tf::DEVICE_CPU), AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("RondeJoin").Device(tf::DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("RondeBarrier").Device(tf::DEVICE_CPU), BarrierKernel);

}  // namespace
}  // namespace ronde::tensorflow_ops
