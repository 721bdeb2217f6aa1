// The LibTorch frontend in real processes: collectives on torch tensors, DistributedOptimizer
// against single-process training on the combined batch, and the state broadcasts.
#include <gtest/gtest.h>

#include "ronde/torch.h"
#include "support/multiprocess.h"
#include "support/runtime_harness.h"

namespace ronde::libtorch {
namespace {

using testing::RankSpec;
using testing::reportFailure;

void check(bool ok, const std::string& what) {
  if (!ok) {
    reportFailure(what);
    throw std::runtime_error(what);
  }
}

void runTorchRanks(int size, const std::function<void(Runtime&)>& body) {
  RankSpec spec;
  spec.size = size;
  testing::runRuntimeRanks(spec, testing::runtimeTestSettings(),
                           [&](std::unique_ptr<Runtime>& runtime, testing::RuntimeContext&) {
                             torch::set_num_threads(1);
                             body(*runtime);
                           });
}

TEST(TorchTensorTest, MapsDtypesAndRejectsWhatItCannotSend) {
  EXPECT_EQ(toDataType(torch::kFloat32), DataType::kFloat32);
  EXPECT_EQ(toDataType(torch::kBFloat16), DataType::kBFloat16);
  EXPECT_EQ(toDataType(torch::kBool), DataType::kBool);
  EXPECT_THROW(toDataType(torch::kComplexFloat), Error);
  TorchTensor t(torch::zeros({2, 3}));
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.data(), t.tensor().data_ptr());
  EXPECT_THROW(TorchTensor(torch::zeros({3, 4}).t()), Error);
}

class TorchCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(TorchCollectivesTest, AllreduceVariants) {
  runTorchRanks(GetParam(), [](Runtime& runtime) {
    Collectives c(runtime);
    int n = runtime.size(), me = runtime.rank();
    double total = n * (n + 1) / 2.0;
    for (auto type : {torch::kFloat32, torch::kFloat64, torch::kInt32, torch::kInt64}) {
      torch::Tensor t = torch::full({3, 2}, me + 1, type);
      torch::Tensor sum = c.allreduce("sum", t, ReduceOp::kSum);
      check(sum.equal(torch::full({3, 2}, total, type)), "allreduce sum");
      check(t.equal(torch::full({3, 2}, me + 1, type)), "out of place leaves input");
    }
    torch::Tensor avg = c.allreduce("avg", torch::full({4}, me + 1.0));
    check(avg.allclose(torch::full({4}, total / n)), "allreduce average");
    torch::Tensor strided = torch::full({4, 3}, me + 1.0).t();
    c.allreduce_("inplace", strided, ReduceOp::kMax);
    check(strided.equal(torch::full({3, 4}, static_cast<double>(n))), "in place max");
    TorchHandle h = c.allreduceAsync("async", torch::ones({5}), ReduceOp::kSum,
                                     Scaling{2.0, 0.5});
    check(h.wait().equal(torch::full({5}, static_cast<float>(n))), "async scaled");
    auto group = c.groupedAllreduce_("group", {torch::ones({2}), torch::ones({3, 1})},
                                     ReduceOp::kSum);
    check(group[1].equal(torch::full({3, 1}, static_cast<float>(n))), "grouped");
  });
}

TEST_P(TorchCollectivesTest, GatherBroadcastAlltoall) {
  runTorchRanks(GetParam(), [](Runtime& runtime) {
    Collectives c(runtime);
    int n = runtime.size(), me = runtime.rank();
    torch::Tensor gathered = c.allgather("gather", torch::full({me + 1, 2}, me));
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < n; ++r) parts.push_back(torch::full({r + 1, 2}, r));
    check(gathered.equal(torch::cat(parts)), "allgather uneven");
    for (int root = 0; root < n; ++root) {
      torch::Tensor t = torch::full({3}, me);
      torch::Tensor copy = c.broadcast("bcast." + std::to_string(root), t, root);
      check(copy.equal(torch::full({3}, root)) && t.equal(torch::full({3}, me)), "broadcast");
    }
    std::vector<int64_t> splits;
    std::vector<torch::Tensor> rows, expected;
    for (int j = 0; j < n; ++j) {
      splits.push_back(j + 1);
      rows.push_back(torch::full({j + 1}, 100 * me + j));
      expected.push_back(torch::full({me + 1}, 100 * j + me));
    }
    auto [out, received] = c.alltoall("a2a", torch::cat(rows), splits);
    check(out.equal(torch::cat(expected)), "alltoall data");
    check(received == std::vector<int64_t>(n, me + 1), "alltoall splits");
    c.barrier();
  });
}

torch::nn::Sequential makeModel() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(4, 5), torch::nn::Tanh(),
                               torch::nn::Linear(5, 2));
}

TEST_P(TorchCollectivesTest, DistributedOptimizerMatchesCombinedBatch) {
  runTorchRanks(GetParam(), [](Runtime& runtime) {
    int n = runtime.size(), me = runtime.rank();
    auto model = makeModel();
    auto reference = makeModel();
    model->to(torch::kFloat64);
    reference->to(torch::kFloat64);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::optim::SGD ref_sgd(reference->parameters(),
                              torch::optim::SGDOptions(0.1).momentum(0.9));
    DistributedOptimizerOptions options;
    options.backward_passes_per_step = 2;
    DistributedOptimizer opt(runtime, sgd, named(model->named_parameters()), options);
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      ref_sgd.zero_grad();
      for (int micro = 0; micro < 2; ++micro) {
        torch::manual_seed(10 * step + micro);
        torch::Tensor x = torch::randn({4 * n, 4}, torch::kFloat64);
        torch::Tensor y = torch::randn({4 * n, 2}, torch::kFloat64);
        torch::mse_loss(model->forward(x.narrow(0, 4 * me, 4)), y.narrow(0, 4 * me, 4))
            .backward();
        torch::mse_loss(reference->forward(x), y).backward();
      }
      opt.step();
      ref_sgd.step();
    }
    auto mine = model->parameters();
    auto theirs = reference->parameters();
    for (size_t i = 0; i < mine.size(); ++i) {
      check(mine[i].allclose(theirs[i], 1e-9, 1e-10), "parameters match the combined batch");
    }
  });
}

TEST_P(TorchCollectivesTest, BroadcastStateAndNameChecks) {
  runTorchRanks(GetParam(), [](Runtime& runtime) {
    int me = runtime.rank();
    torch::manual_seed(me);
    torch::nn::Linear model(3, 2);
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01 * (me + 1)));
    torch::sum(model->forward(torch::randn({4, 3}))).backward();
    adam.step();
    broadcastParameters(runtime, named(model->named_parameters()), 0);
    broadcastOptimizerState(runtime, adam, 0);
    Collectives c(runtime);
    torch::Tensor flat = torch::cat({model->weight.detach().flatten(), model->bias.detach()});
    torch::Tensor root = c.broadcast("check.params", flat, 0);
    check(flat.equal(root), "parameters equal root's");
    auto& options = static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options());
    check(std::abs(options.lr() - 0.01) < 1e-12, "optimizer options equal root's");

    NamedTensors missing = named(model->named_parameters());
    missing.pop_back();
    bool threw = false;
    try {
      DistributedOptimizer bad(runtime, adam, missing);
    } catch (const Error& e) {
      threw = e.code() == ErrorCode::kInvalidArgument;
    }
    check(threw, "a missing name is refused");
  });
}

// Ranks 0 and 1 run barriers in a process set that rank 2 is not in; the world barriers
// after them must still meet (a per-process barrier number once named them differently on
// ranks 0-1 than on rank 2, and the job stalled). Each barrier uses a fresh Collectives
// object on rank 1 only, so names cannot depend on which object a rank calls through.
TEST(TorchBarrierTest, BarriersInAProcessSetDoNotShiftWorldBarriers) {
  RankSpec spec;
  spec.size = 3;
  spec.timeout_seconds = 60;  // a stall fails the run when the harness kills it
  testing::runRuntimeRanks(
      spec, testing::runtimeTestSettings(),
      [](std::unique_ptr<Runtime>& runtime, testing::RuntimeContext&) {
        torch::set_num_threads(1);
        const int me = runtime->rank();
        const int pair = runtime->addProcessSet({0, 1});
        Collectives shared(*runtime);
        for (int round = 0; round < 3; ++round) {
          if (me != 2) {
            for (int i = 0; i <= round; ++i) {
              if (me == 1) {
                Collectives(*runtime).barrier(pair);
              } else {
                shared.barrier(pair);
              }
            }
          }
          shared.barrier();
          torch::Tensor sum = shared.allreduce("after.barrier." + std::to_string(round),
                                               torch::full({2}, me + 1.0), ReduceOp::kSum);
          check(sum.equal(torch::full({2}, 6.0)), "allreduce after the world barrier");
        }
      });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TorchCollectivesTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace ronde::libtorch
