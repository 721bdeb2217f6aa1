// Thousands of steps of random mixes (kinds, sizes, dtypes, ops, scaling, submission order,
// names that come back with new shapes, process sets, a cached group whose member changes
// shape now and then, fusion threshold changes) against a
// reference computed independently from every rank's known inputs: 600 steps per world size
// 1 to 4, plus variants (tiny cache, no cache, two simulated hosts, TCP only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "support/reference.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

struct Planned {
  RequestKind kind;
  std::string name;
  DataType type;
  ReduceOp op;
  Scaling scaling;
  int64_t cols;  // elements per row
  int64_t rows;  // allreduce / broadcast / reducescatter rows
  int root;      // index within the process set
  int salt;
  int set = 0;  // index into the job's groups (0: all ranks)
  bool grouped = false;  // submitted with the step's other grouped requests (enqueueGroup)
};

// The process sets of a soak: groups[0] is the world; ids[i] what addProcessSet returned.
struct Groups {
  std::vector<std::vector<int>> members;
  std::vector<int> ids;
};

// rows rank `r` contributes to an allgather, or sends to the set's `j`-th rank in an alltoall.
int64_t gatherRows(const Planned& p, int r) { return (r + p.salt) % 3; }
int64_t sendRows(const Planned& p, int r, int j) { return (r + 2 * j + p.salt) % 3; }

// The step's plan: the same on every rank.
std::vector<Planned> planStep(int step, int size, const Groups& groups) {
  std::mt19937 rng(static_cast<unsigned>(step * 7919 + size));
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const DataType types[] = {DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                            DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  std::vector<Planned> plan;
  int count = 1 + pick(10);
  for (int i = 0; i < count; ++i) {
    Planned p;
    int k = pick(10);
    p.kind = k < 5    ? RequestKind::kAllreduce
             : k == 5 ? RequestKind::kAllgather
             : k == 6 ? RequestKind::kBroadcast
             : k == 7 ? RequestKind::kAlltoall
                      : RequestKind::kReducescatter;
    // A small pool of names: they return with other shapes, dtypes and kinds.
    p.name = "n" + std::to_string(pick(12)) + "." + std::to_string(i);
    p.type = types[pick(6)];
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct,
                            ReduceOp::kAverage};
    p.op = ops[pick(isFloat(p.type) ? 5 : 4)];
    if (isFloat(p.type) && pick(3) == 0) p.scaling = Scaling{2.0, 0.5};
    p.cols = 1 + (pick(4) == 0 ? pick(3000) : pick(40));
    p.rows = 1 + pick(5);
    p.set = pick(3) == 0 ? pick(static_cast<int>(groups.members.size())) : 0;
    p.root = pick(static_cast<int>(groups.members[static_cast<size_t>(p.set)].size()));
    p.salt = pick(5);
    plan.push_back(p);
  }
  // Names are unique within a step.
  for (size_t i = 0; i < plan.size(); ++i) plan[i].name += "#" + std::to_string(step % 3);
  // And the steady part of a training step: the same names and signatures every step (the
  // cached path), with new data.
  for (int j = 0; j < 6; ++j) {
    Planned p;
    p.kind = j < 4 ? RequestKind::kAllreduce
                   : (j == 4 ? RequestKind::kAllgather : RequestKind::kBroadcast);
    p.name = "layer." + std::to_string(j);
    p.type = types[j];
    p.op = isFloat(p.type) ? ReduceOp::kAverage : ReduceOp::kSum;
    p.cols = 30 + 50 * j;
    p.rows = 2;
    p.root = 0;
    p.salt = p.kind == RequestKind::kAllgather ? 1 : step % 5;  // allgather rows follow the salt
    plan.push_back(p);
  }
  // A steady group (grouped_allreduce and the like), cached after its first step; one member
  // changes shape every seventh step, which must send the whole group the full way.
  for (int j = 0; j < 4; ++j) {
    Planned p;
    p.kind = j == 3 ? RequestKind::kReducescatter : RequestKind::kAllreduce;
    p.name = "block." + std::to_string(j);
    p.type = j == 2 ? DataType::kFloat64 : DataType::kFloat32;
    p.op = ReduceOp::kSum;
    p.cols = 20 + (j == 1 && step % 7 == 6 ? 5 : 0);
    p.rows = 3;
    p.root = 0;
    p.salt = step % 5;
    p.grouped = true;
    plan.push_back(p);
  }
  return plan;
}

void fill(Tensor& t, int rank, int salt, size_t offset = 0) {
  for (size_t i = 0; i < t.numel(); ++i)
    storeValue(t.dtype(), t.data(), i, inputValue(t.dtype(), rank, offset + i, salt));
}

double tolerance(DataType type, double want) {
  if (type == DataType::kFloat16) return 1e-2 * std::max(1.0, std::fabs(want));
  if (type == DataType::kBFloat16) return 2e-2 * std::max(1.0, std::fabs(want));
  return 1e-6 * std::max(1.0, std::fabs(want));
}

double reduced(const Planned& p, const std::vector<int>& members, size_t i) {
  double pre = p.scaling.prescale;
  int size = static_cast<int>(members.size());
  double acc = inputValue(p.type, members[0], i, p.salt) * pre;
  for (int m = 1; m < size; ++m) {
    double v = inputValue(p.type, members[static_cast<size_t>(m)], i, p.salt) * pre;
    switch (p.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kAdasum:
        break;  // the soak never plans Adasum (adasum_test covers it)
    }
  }
  if (p.op == ReduceOp::kAverage) acc /= size;
  return acc * p.scaling.postscale;
}

// `members`: the world ranks of the request's set; `rank`: this rank's index among them.
void check(const Planned& p, Handle& h, const std::vector<int>& members, int rank) {
  int size = static_cast<int>(members.size());
  std::shared_ptr<Tensor> out = h.output();
  auto expect = [&](size_t i, double want) {
    double got = loadValue(p.type, out->data(), i);
    REQUIRE(std::fabs(got - want) <= tolerance(p.type, want),
            static_cast<int>(p.kind)
                << " '" << p.name << "' " << dataTypeName(p.type) << " " << reduceOpName(p.op)
                << " element " << i << ": got " << got << ", want " << want);
  };
  size_t cols = static_cast<size_t>(p.cols);
  switch (p.kind) {
    case RequestKind::kAllreduce:
      for (size_t i = 0; i < out->numel(); ++i) expect(i, reduced(p, members, i));
      break;
    case RequestKind::kBroadcast:
      for (size_t i = 0; i < out->numel(); ++i) {
        expect(i, inputValue(p.type, members[static_cast<size_t>(p.root)], i, p.salt));
      }
      break;
    case RequestKind::kAllgather: {
      size_t at = 0;
      for (int r : members) {
        for (size_t i = 0; i < static_cast<size_t>(gatherRows(p, r)) * cols; ++i)
          expect(at++, inputValue(p.type, r, i, p.salt));
      }
      REQUIRE(at == out->numel(), "allgather size");
      break;
    }
    case RequestKind::kAlltoall: {
      size_t at = 0;
      for (int src : members) {
        size_t offset = 0;  // where the block for `rank` starts in src's input
        for (int j = 0; j < rank; ++j) offset += static_cast<size_t>(sendRows(p, src, j)) * cols;
        for (size_t i = 0; i < static_cast<size_t>(sendRows(p, src, rank)) * cols; ++i) {
          expect(at++, inputValue(p.type, src, offset + i, p.salt));
        }
      }
      REQUIRE(at == out->numel(), "alltoall size");
      break;
    }
    case RequestKind::kReducescatter: {
      int64_t first = 0;
      for (int r = 0; r < rank; ++r) first += p.rows / size + (r < p.rows % size ? 1 : 0);
      for (size_t i = 0; i < out->numel(); ++i)
        expect(i, reduced(p, members, static_cast<size_t>(first) * cols + i));
      break;
    }
    default:
      break;
  }
}

void soak(int size, int steps, const Settings& settings, RankSpec spec = {}) {
  {
    spec.size = size;
    spec.timeout_seconds = 240;
    runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
      std::mt19937 order_rng(static_cast<unsigned>(ctx.rank + 1));
      Groups groups;
      groups.members.push_back({});
      for (int r = 0; r < size; ++r) groups.members[0].push_back(r);
      groups.ids.push_back(0);
      std::vector<std::vector<int>> extra;
      if (size == 3) extra = {{0, 2}};
      if (size == 4) extra = {{0, 1}, {1, 2, 3}, {3}};
      for (const auto& ranks : extra) {
        groups.ids.push_back(rt->addProcessSet(ranks));
        groups.members.push_back(ranks);
      }
      for (int step = 0; step < steps; ++step) {
        if (ctx.rank == 0 && step % 97 == 0)
          rt->setFusionThreshold(step % 2 ? 0 : 1024 * (1 + step % 5));
        std::vector<Planned> plan = planStep(step, size, groups);
        std::vector<size_t> order(plan.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), order_rng);
        std::vector<std::shared_ptr<Tensor>> inputs(plan.size());
        std::vector<std::shared_ptr<Handle>> handles(plan.size());
        auto indexIn = [&](const Planned& p) {
          const auto& m = groups.members[static_cast<size_t>(p.set)];
          auto it = std::find(m.begin(), m.end(), ctx.rank);
          return it == m.end() ? -1 : static_cast<int>(it - m.begin());
        };
        std::vector<Request> group;
        std::vector<size_t> group_plan;  // the plan entries of `group`
        for (size_t i : order) {
          const Planned& p = plan[i];
          if (indexIn(p) < 0) continue;  // not in its process set
          Request r;
          r.process_set = groups.ids[static_cast<size_t>(p.set)];
          r.kind = p.kind;
          r.name = p.name;
          r.op = p.op;
          r.scaling = p.scaling;
          r.root = p.root;
          int64_t rows = p.rows;
          if (p.kind == RequestKind::kAllgather) rows = gatherRows(p, ctx.rank);
          if (p.kind == RequestKind::kAlltoall) {
            rows = 0;
            for (size_t j = 0; j < groups.members[static_cast<size_t>(p.set)].size(); ++j) {
              r.splits.push_back(sendRows(p, ctx.rank, static_cast<int>(j)));
              rows += r.splits.back();
            }
          }
          auto t = std::make_shared<HostTensor>(p.type, std::vector<int64_t>{rows, p.cols});
          fill(*t, ctx.rank, p.salt);
          inputs[i] = t;
          r.input = t;
          if (p.kind == RequestKind::kAllreduce && step % 2)
            r.output = t;  // in place, half the time
          if (p.grouped) {
            group.push_back(r);
            group_plan.push_back(i);
            continue;
          }
          handles[i] = rt->enqueue(r);
        }
        if (!group.empty()) {
          // Every rank lists a group's members in the same order (the plan's).
          std::vector<size_t> by_plan(group.size());
          for (size_t g = 0; g < by_plan.size(); ++g) by_plan[g] = g;
          std::sort(by_plan.begin(), by_plan.end(),
                    [&](size_t a, size_t b) { return group_plan[a] < group_plan[b]; });
          std::vector<Request> ordered;
          std::vector<size_t> ordered_plan;
          for (size_t g : by_plan) {
            ordered.push_back(group[g]);
            ordered_plan.push_back(group_plan[g]);
          }
          group.swap(ordered);
          group_plan.swap(ordered_plan);
          std::vector<std::shared_ptr<Handle>> grouped = rt->enqueueGroup(group);
          for (size_t g = 0; g < grouped.size(); ++g) handles[group_plan[g]] = grouped[g];
        }
        for (size_t i = 0; i < plan.size(); ++i) {
          if (!handles[i]) continue;
          handles[i]->wait(std::chrono::seconds(60));
          check(plan[i], *handles[i], groups.members[static_cast<size_t>(plan[i].set)],
                indexIn(plan[i]));
        }
      }
      RuntimeStats stats = rt->stats();
      if (settings.cache_capacity >= 8) {
        REQUIRE(stats.cached_responses > static_cast<uint64_t>(steps) * 3,
                "the steady requests should mostly be decided by the cache: "
                    << stats.cached_responses);
      }
      REQUIRE(stats.collectives < stats.responses, "fusion should pack some requests");
    });
  }
}

Settings soakSettings() {
  Settings settings = runtimeTestSettings();
  settings.cycle_time_ms = 0.5;
  settings.fusion_threshold_bytes = 4096;
  return settings;
}

TEST(RuntimeSoak, RandomMixesAgainstAReference) {
  for (int size = 1; size <= 4; ++size) {
    soak(size, 600, soakSettings());
    if (::testing::Test::HasFailure()) return;
  }
}

// A cache far smaller than the set of names: entries are evicted and replaced all the time,
// and requests waiting on an evicted slot must fall back to the full exchange.
TEST(RuntimeSoak, TinyCacheEvictsConstantly) {
  Settings settings = soakSettings();
  settings.cache_capacity = 4;
  soak(3, 300, settings);
}

TEST(RuntimeSoak, CacheDisabled) {
  Settings settings = soakSettings();
  settings.cache_capacity = 0;
  soak(2, 300, settings);
}

// Two simulated hosts: shared memory inside each, TCP between them (hierarchical allreduce).
TEST(RuntimeSoak, AcrossTwoHosts) {
  RankSpec spec;
  spec.hosts = {"a", "a", "b", "b"};
  soak(4, 100, soakSettings(), spec);
}

TEST(RuntimeSoak, OverTcpOnly) {
  RankSpec spec;
  spec.transport = TransportKind::kTcp;
  soak(3, 200, soakSettings(), spec);
}

}  // namespace
}  // namespace ronde::testing
