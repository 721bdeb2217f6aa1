// The runtime's communicators: negotiation on a control communicator of its own, and process
// sets on data communicators over their members only, so that a rank outside a set moves no
// bytes for it (measured by the kernel: /proc/self/io over TCP) and results still match a
// reference computed here.
#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <string>

#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

// Bytes this process has passed through read/write-like system calls (sockets included).
int64_t ioBytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0, total = 0;
  while (io >> key >> value) {
    if (key == "rchar:" || key == "wchar:") total += value;
  }
  return total;
}

void barrier(Runtime& rt, const std::string& name) {
  Request b;
  b.kind = RequestKind::kBarrier;
  b.name = name;
  rt.enqueue(b)->wait(std::chrono::seconds(60));
}

TEST(RuntimeSubcommunicators, SubCommunicatorOverSomeRanksOnly) {
  RankSpec spec;
  spec.size = 3;
  runRanks(spec, [](Communicator& world) {
    // Rank 1 does not take part: ranks 0 and 2 meet without it.
    if (world.rank() != 1) {
      auto sub = world.subCommunicator({0, 2}, "pair");
      REQUIRE(sub->size() == 2 && sub->rank() == (world.rank() == 0 ? 0 : 1),
              "rank " << sub->rank() << " of " << sub->size());
      REQUIRE(sub->host(sub->rank()) == world.host(world.rank()), "host");
      std::vector<int32_t> v = {world.rank() + 1, 10};
      sub->allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
      REQUIRE(v[0] == 1 + 3 && v[1] == 20, "sum over {0, 2}: " << v[0] << " " << v[1]);
    }
    bool refused = false;
    try {
      world.subCommunicator({(world.rank() + 1) % 3}, "without-me");
    } catch (const Error& e) {
      refused = e.code() == ErrorCode::kInvalidArgument;
    }
    REQUIRE(refused, "a list without this rank is refused");
    refused = false;
    try {
      world.subCommunicator({2, 0, 1}, "unsorted");
    } catch (const Error& e) {
      refused = e.code() == ErrorCode::kInvalidArgument;
    }
    REQUIRE(refused, "an unsorted list is refused");
    world.barrier();
  });
}

// Errors of a sub-communicator name ranks as the world knows them: {1, 2}'s second member is
// rank 2, not its index 1.
TEST(RuntimeSubcommunicators, ASubCommunicatorNamesPeersByTheirWorldRank) {
  RankSpec spec;
  spec.size = 3;
  spec.transport = TransportKind::kTcp;
  runRanks(spec, [](Communicator& world) {
    if (world.rank() != 0) {
      auto sub = world.subCommunicator({1, 2}, "pair");
      if (world.rank() == 2) {
        sub.reset();  // leaves: its links close under rank 1's allreduce
      } else {
        std::string seen;
        try {
          int32_t v = 1;
          sub->allreduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum);
        } catch (const Error& e) {
          seen = e.what();
        }
        REQUIRE(seen.find("rank 2 (host") != std::string::npos, "rank 1 saw: '" << seen << "'");
      }
    }
    world.barrier();
  });
}

// A set {0, 1} in a world of 3 over TCP: each 4 MiB allreduce of the set would cost rank 2
// about 2 x 2/3 x 4 MiB of socket traffic if it took part (a ring over the world). It must
// see only the control plane's few bytes per cycle.
TEST(RuntimeSubcommunicators, NonMembersMoveNoBytesForASet) {
  RankSpec spec;
  spec.size = 3;
  spec.transport = TransportKind::kTcp;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        const int set = rt->addProcessSet({0, 1});
        constexpr size_t kElements = 1 << 20;  // 4 MiB of float32
        constexpr int kSteps = 4;
        barrier(*rt, "before");
        const int64_t before = ioBytes();
        if (ctx.rank < 2) {
          for (int step = 0; step < kSteps; ++step) {
            auto t = filledFloats(kElements, static_cast<float>(ctx.rank + step));
            Request r;
            r.name = "big";
            r.input = r.output = t;
            r.process_set = set;
            rt->enqueue(r)->wait(std::chrono::seconds(60));
            // Reference: (0 + step + i) + (1 + step + i), exact in float32 below 2^24.
            for (size_t i : {size_t{0}, kElements / 2, kElements - 1}) {
              float want = static_cast<float>(2 * (step + static_cast<int64_t>(i)) + 1);
              REQUIRE(t->as<float>()[i] == want,
                      "step " << step << " [" << i << "] " << t->as<float>()[i] << " != " << want);
            }
          }
        }
        barrier(*rt, "after");
        const int64_t moved = ioBytes() - before;
        if (ctx.rank == 2) {
          const int64_t would_be = kSteps * static_cast<int64_t>(kElements * sizeof(float));
          REQUIRE(moved < would_be / 8, "rank 2 moved " << moved << " bytes during the set's "
                                                        << kSteps << " allreduces");
        }
        rt->removeProcessSet(set);
      });
}

// Members {0, 2} of a world of 3: every kind, checked against a reference, with the set's
// ranks (index in the set) where a rank is named.
TEST(RuntimeSubcommunicators, EveryKindInASetMatchesAReference) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        const int set = rt->addProcessSet({2, 0});
        if (ctx.rank == 1) {
          // Outside the set, rank 1 only negotiates.
          barrier(*rt, "done");
          return;
        }
        const int me = ctx.rank == 0 ? 0 : 1;  // index in the set
        auto make = [&](RequestKind kind, const std::string& name, std::shared_ptr<Tensor> in) {
          Request r;
          r.kind = kind;
          r.name = name;
          r.input = in;
          r.process_set = set;
          return r;
        };
        // Allreduce, averaged: (0 + 2) / 2 + i.
        auto a = filledFloats(5, static_cast<float>(ctx.rank));
        Request ar = make(RequestKind::kAllreduce, "avg", a);
        ar.output = a;
        ar.op = ReduceOp::kAverage;
        rt->enqueue(ar)->wait(std::chrono::seconds(30));
        for (int i = 0; i < 5; ++i) REQUIRE(a->as<float>()[i] == 1.0f + i, "average " << i);

        // Allgather: set rank k contributes k + 1 rows of value 10 * (world rank).
        auto g = std::make_shared<HostTensor>(DataType::kFloat32, std::vector<int64_t>{me + 1, 2});
        for (size_t i = 0; i < g->numel(); ++i) g->as<float>()[i] = 10.0f * ctx.rank;
        auto hg = rt->enqueue(make(RequestKind::kAllgather, "gather", g));
        hg->wait(std::chrono::seconds(30));
        auto got = std::static_pointer_cast<HostTensor>(hg->output());
        REQUIRE(got->shape() == (std::vector<int64_t>{3, 2}),
                "gathered " << got->numel() << " elements");
        const float gathered[] = {0, 0, 20, 20, 20, 20};
        for (int i = 0; i < 6; ++i) REQUIRE(got->as<float>()[i] == gathered[i], "gather " << i);

        // Broadcast from the set's rank 1: world rank 2.
        auto b = filledFloats(4, static_cast<float>(100 * ctx.rank));
        Request br = make(RequestKind::kBroadcast, "bcast", b);
        br.output = b;
        br.root = 1;
        rt->enqueue(br)->wait(std::chrono::seconds(30));
        REQUIRE(b->as<float>()[0] == 200.0f && b->as<float>()[3] == 203.0f, "broadcast");

        // Alltoall with splits: set rank k sends k + 1 rows to each peer, row value 10 * k + j.
        auto t =
            std::make_shared<HostTensor>(DataType::kFloat32, std::vector<int64_t>{2 * (me + 1)});
        for (int64_t i = 0; i < 2 * (me + 1); ++i)
          t->as<float>()[i] = static_cast<float>(10 * me + i / (me + 1));
        Request tr = make(RequestKind::kAlltoall, "a2a", t);
        tr.splits = {me + 1, me + 1};
        auto ht = rt->enqueue(tr);
        ht->wait(std::chrono::seconds(30));
        auto recv = std::static_pointer_cast<HostTensor>(ht->output());
        // From set rank 0: 1 row of 0 + me; from set rank 1: 2 rows of 10 + me.
        std::vector<float> want = {static_cast<float>(me), 10.0f + me, 10.0f + me};
        REQUIRE(recv->numel() == want.size(), "alltoall rows " << recv->numel());
        for (size_t i = 0; i < want.size(); ++i)
          REQUIRE(recv->as<float>()[i] == want[i],
                  "alltoall " << i << ": " << recv->as<float>()[i]);

        // Reducescatter of 5 rows: set rank 0 gets rows 0-2, rank 1 rows 3-4; sum of i + rank.
        auto rs = filledFloats(5, static_cast<float>(ctx.rank));
        auto hr = rt->enqueue(make(RequestKind::kReducescatter, "rs", rs));
        hr->wait(std::chrono::seconds(30));
        auto mine = std::static_pointer_cast<HostTensor>(hr->output());
        const int first = me == 0 ? 0 : 3;
        REQUIRE(mine->numel() == (me == 0 ? 3u : 2u), "reducescatter rows " << mine->numel());
        for (size_t i = 0; i < mine->numel(); ++i) {
          float want_rs = 2.0f * static_cast<float>(first + static_cast<int>(i)) + 2.0f;
          REQUIRE(mine->as<float>()[i] == want_rs, "reducescatter " << i);
        }
        barrier(*rt, "done");
      });
}

}  // namespace
}  // namespace ronde::testing
