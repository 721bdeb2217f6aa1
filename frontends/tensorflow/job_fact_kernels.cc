// The kernels of the job-fact ops (RondeSize, RondeRank, ... in ops.cc): each reads the
// process's shared runtime when it runs, so a graph built before init, or before an elastic
// world re-formed, answers for the world it runs in. Synchronous: they do not wait on peers.
#include <algorithm>
#include <string>
#include <vector>

#include "ronde/shared_runtime.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_tensor.h"

namespace ronde::tensorflow_ops {
namespace {

namespace tf = ::tensorflow;

enum class Fact { kSize, kRank, kLocalSize, kLocalRank, kIncluded };

template <Fact kFact>
class JobFactKernel : public tf::OpKernel {
 public:
  explicit JobFactKernel(tf::OpKernelConstruction* c) : tf::OpKernel(c) {
    if (kFact == Fact::kSize || kFact == Fact::kIncluded) {
      OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    }
  }

  void Compute(tf::OpKernelContext* context) override {
    int value = 0;
    try {
      value = read();
    } catch (const Error& e) {
      context->SetStatus(statusOf(e));
      return;
    }
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  int read() const {
    std::shared_ptr<Runtime> runtime = shared_runtime::get();  // throws when not initialized
    switch (kFact) {
      case Fact::kRank: return runtime->rank();
      case Fact::kLocalSize: return runtime->localSize();
      case Fact::kLocalRank: return runtime->localRank();
      case Fact::kSize: return static_cast<int>(runtime->processSetRanks(process_set_).size());
      case Fact::kIncluded: {
        const std::vector<int> ranks = runtime->processSetRanks(process_set_);
        return std::find(ranks.begin(), ranks.end(), runtime->rank()) != ranks.end() ? 1 : 0;
      }
    }
    return 0;
  }

  int process_set_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("RondeSize").Device(tf::DEVICE_CPU), JobFactKernel<Fact::kSize>);
REGISTER_KERNEL_BUILDER(Name("RondeRank").Device(tf::DEVICE_CPU), JobFactKernel<Fact::kRank>);
REGISTER_KERNEL_BUILDER(Name("RondeLocalSize").Device(tf::DEVICE_CPU),
                        JobFactKernel<Fact::kLocalSize>);
REGISTER_KERNEL_BUILDER(Name("RondeLocalRank").Device(tf::DEVICE_CPU),
                        JobFactKernel<Fact::kLocalRank>);
REGISTER_KERNEL_BUILDER(Name("RondeProcessSetIncluded").Device(tf::DEVICE_CPU),
                        JobFactKernel<Fact::kIncluded>);

}  // namespace
}  // namespace ronde::tensorflow_ops
