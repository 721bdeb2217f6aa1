// The Runtime (negotiation, fusion, process sets, shutdown then init) over the MPI backend,
// under mpirun -np 2 and 3 with RONDE_CPU_OPERATIONS=mpi; results against plain arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "ronde/runtime.h"

namespace ronde {
namespace {

std::shared_ptr<HostTensor> floats(int64_t n, float value) {
  auto t = std::make_shared<HostTensor>(DataType::kFloat32, std::vector<int64_t>{n});
  std::fill(t->as<float>(), t->as<float>() + n, value);
  return t;
}

Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t, int process_set = 0) {
  Request r;
  r.name = name;
  r.input = t;
  r.output = t;
  r.process_set = process_set;
  return r;
}

TEST(MpiRuntime, NamedRequestsInAnyOrderFuseAndComplete) {
  auto rt = Runtime::init();
  EXPECT_EQ(rt->communicator().transportName(), "mpi");
  const int n = rt->size();
  std::vector<int> order(24);
  std::iota(order.begin(), order.end(), 0);
  if (rt->rank() % 2 == 1) std::reverse(order.begin(), order.end());
  std::vector<std::shared_ptr<HostTensor>> tensors(order.size());
  std::vector<std::shared_ptr<Handle>> handles(order.size());
  for (int i : order) {
    tensors[static_cast<size_t>(i)] = floats(100 + i, static_cast<float>((rt->rank() + 1) * i));
    handles[static_cast<size_t>(i)] =
        rt->enqueue(allreduceOf("grad." + std::to_string(i), tensors[static_cast<size_t>(i)]));
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    handles[i]->wait(std::chrono::seconds(60));
    const float want = static_cast<float>(i) * static_cast<float>(n * (n + 1) / 2);
    EXPECT_EQ(tensors[i]->as<float>()[0], want) << "tensor " << i;
    EXPECT_EQ(tensors[i]->as<float>()[99 + i], want) << "tensor " << i;
  }
  rt->shutdown();
}

TEST(MpiRuntime, ProcessSetOfTheFirstTwoRanks) {
  auto rt = Runtime::init();
  const int set = rt->addProcessSet({0, 1});
  if (rt->rank() < 2) {
    auto t = floats(1000, static_cast<float>(rt->rank() + 1));
    rt->enqueue(allreduceOf("in.set", t, set))->wait(std::chrono::seconds(60));
    EXPECT_EQ(t->as<float>()[999], 3.0f);
  }
  auto all = floats(10, 1.0f);
  rt->enqueue(allreduceOf("everyone", all))->wait(std::chrono::seconds(60));
  EXPECT_EQ(all->as<float>()[9], static_cast<float>(rt->size()));
  rt->removeProcessSet(set);
  rt->shutdown();
}

TEST(MpiRuntime, ShutdownThenInitAgain) {
  for (int cycle = 0; cycle < 5; ++cycle) {
    auto rt = Runtime::init();
    auto t = floats(7, static_cast<float>(cycle + rt->rank()));
    rt->enqueue(allreduceOf("cycle", t))->wait(std::chrono::seconds(60));
    const int n = rt->size();
    EXPECT_EQ(t->as<float>()[6], static_cast<float>(n * cycle + n * (n - 1) / 2)) << cycle;
    rt->shutdown();
  }
}

}  // namespace
}  // namespace ronde
