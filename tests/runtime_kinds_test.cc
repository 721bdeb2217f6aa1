// Alltoall, reducescatter, join, process sets, groups, scaling and mixed-dtype fusion, and
// knobs changed while running.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t,
                    ReduceOp op = ReduceOp::kSum, int process_set = 0) {
  Request r;
  r.name = name;
  r.input = r.output = t;
  r.op = op;
  r.process_set = process_set;
  return r;
}

// The stats once `responses` more requests than in `before` were decided: they are counted
// as the cycle ends, just after the handles complete (waits at most a second).
RuntimeStats statsAfter(Runtime& rt, const RuntimeStats& before, uint64_t responses) {
  RuntimeStats after = rt.stats();
  for (int i = 0; i < 1000 && after.responses - before.responses < responses; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    after = rt.stats();
  }
  return after;
}

TEST(RuntimeKinds, AlltoallWithUnevenSplits) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        int n = ctx.size;
        // Rank r sends r + j + 1 rows (2 elements each) to rank j; row value = 100 r + 10 j + row.
        std::vector<int64_t> splits;
        int64_t rows = 0;
        for (int j = 0; j < n; ++j) {
          splits.push_back(ctx.rank + j + 1);
          rows += ctx.rank + j + 1;
        }
        auto in = std::make_shared<HostTensor>(DataType::kInt64, std::vector<int64_t>{rows, 2});
        int64_t at = 0;
        for (int j = 0; j < n; ++j) {
          for (int k = 0; k < ctx.rank + j + 1; ++k, ++at) {
            in->as<int64_t>()[2 * at] = in->as<int64_t>()[2 * at + 1] = 100 * ctx.rank + 10 * j + k;
          }
        }
        Request r;
        r.kind = RequestKind::kAlltoall;
        r.name = "a2a";
        r.input = in;
        r.splits = splits;
        auto h = rt->enqueue(r);
        h->wait();
        std::vector<int64_t> got_rows = h->result();
        REQUIRE(got_rows.size() == static_cast<size_t>(n), "result size");
        const int64_t* out = static_cast<const int64_t*>(h->output()->data());
        at = 0;
        for (int src = 0; src < n; ++src) {
          REQUIRE(got_rows[static_cast<size_t>(src)] == src + ctx.rank + 1, "rows from " << src);
          for (int k = 0; k < src + ctx.rank + 1; ++k, ++at) {
            REQUIRE(out[2 * at] == 100 * src + 10 * ctx.rank + k,
                    "alltoall value from " << src << " row " << k);
          }
        }
      });
}

TEST(RuntimeKinds, ReducescatterSplitsRowsAmongRanks) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        auto in = std::make_shared<HostTensor>(DataType::kFloat32, std::vector<int64_t>{7, 2});
        for (int i = 0; i < 14; ++i) in->as<float>()[i] = static_cast<float>(i * (ctx.rank + 1));
        Request r;
        r.kind = RequestKind::kReducescatter;
        r.name = "rs";
        r.input = in;
        r.scaling.postscale = 0.5;
        auto h = rt->enqueue(r);
        h->wait();
        // 7 rows among 3 ranks: 3, 2, 2.
        int64_t first_row = ctx.rank == 0 ? 0 : (ctx.rank == 1 ? 3 : 5);
        int64_t my_rows = ctx.rank == 0 ? 3 : 2;
        REQUIRE(h->output()->shape() == (std::vector<int64_t>{my_rows, 2}), "shape");
        const float* out = static_cast<const float*>(h->output()->data());
        for (int64_t i = 0; i < my_rows * 2; ++i) {
          float want = 0.5f * static_cast<float>((first_row * 2 + i) * 6);  // 1 + 2 + 3
          REQUIRE(out[i] == want, "element " << i << ": " << out[i] << " != " << want);
        }
      });
}

TEST(RuntimeKinds, JoinedRanksContributeZerosAndJoinReturnsTheLastRank) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        // Rank r has r + 1 batches: rank 2 joins last.
        for (int step = 0; step <= ctx.rank; ++step) {
          auto t = filledFloats(5, 1.0f);
          rt->enqueue(allreduceOf("grad", t))->wait(std::chrono::seconds(30));
          int contributors = ctx.size - step;  // ranks with a batch at this step
          REQUIRE(t->as<float>()[0] == static_cast<float>(contributors),
                  "step " << step << ": " << t->as<float>()[0]);
        }
        Request j;
        j.kind = RequestKind::kJoin;
        auto h = rt->enqueue(j);
        h->wait(std::chrono::seconds(30));
        REQUIRE(h->result() == std::vector<int64_t>{2}, "last rank to join: " << h->result().at(0));
        // The runtime works normally after the join.
        auto t = filledFloats(2, 1.0f);
        rt->enqueue(allreduceOf("after", t))->wait(std::chrono::seconds(30));
        REQUIRE(t->as<float>()[0] == 3.0f, "after join");
      });
}

TEST(RuntimeKinds, CachedAllgatherFailsWhileARankHasJoined) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        auto gather = [&] {
          Request g;
          g.kind = RequestKind::kAllgather;
          g.name = "g";
          g.input = filledFloats(2, static_cast<float>(ctx.rank));
          return rt->enqueue(g);
        };
        for (int round = 0; round < 2; ++round) gather()->wait(std::chrono::seconds(30));
        Request j;
        j.kind = RequestKind::kJoin;
        if (ctx.rank == 0) {
          rt->enqueue(j)->wait(std::chrono::seconds(30));
          return;
        }
        // Rank 0 has joined and will never set the cached allgather's bit: the request must
        // fail through negotiation (the stall inspector is off here), not wait.
        auto t = filledFloats(3, 1.0f);
        rt->enqueue(allreduceOf("active", t))->wait(std::chrono::seconds(30));
        REQUIRE(t->as<float>()[0] == 2.0f, "allreduce among the active ranks");
        std::string error;
        try {
          gather()->wait(std::chrono::seconds(30));
        } catch (const Error& e) {
          error = e.what();
        }
        REQUIRE(error.find("joined") != std::string::npos, "cached allgather: '" << error << "'");
        rt->enqueue(j)->wait(std::chrono::seconds(30));
      });
}

// A cached group of an allreduce and an allgather while a rank has joined: the allgather must
// leave the cached path, and the allreduce with it (a group is released whole). Were the
// allreduce released by the cache bits alone, the table would wait forever for the group's
// second member. Both end, the allgather failing on the joined rank.
TEST(RuntimeKinds, CachedMixedGroupLeavesTheCacheWholeWhileARankHasJoined) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        std::shared_ptr<HostTensor> reduced;
        auto group = [&] {
          reduced = filledFloats(4, 1.0f);
          Request g;
          g.kind = RequestKind::kAllgather;
          g.name = "mixed.gather";
          g.input = filledFloats(2, static_cast<float>(ctx.rank));
          return rt->enqueueGroup({allreduceOf("mixed.reduce", reduced), g});
        };
        for (int round = 0; round < 3; ++round) {
          RuntimeStats before = rt->stats();
          for (auto& h : group()) h->wait(std::chrono::seconds(30));
          REQUIRE(reduced->as<float>()[0] == 3.0f, "round " << round);
          const RuntimeStats after = statsAfter(*rt, before, 2);
          if (round > 0) {
            REQUIRE(after.cached_responses - before.cached_responses == 2,
                    "round " << round << ": the group decided by the cache");
          }
        }
        Request j;
        j.kind = RequestKind::kJoin;
        if (ctx.rank == 0) {
          rt->enqueue(j)->wait(std::chrono::seconds(30));
          return;
        }
        auto handles = group();
        std::string error;
        try {
          handles[1]->wait(std::chrono::seconds(30));
        } catch (const Error& e) {
          error = e.what();
        }
        REQUIRE(error.find("joined") != std::string::npos, "the allgather: '" << error << "'");
        try {
          handles[0]->wait(std::chrono::seconds(30));
        } catch (const Error& e) {
          REQUIRE(std::string(e.what()).find("pending") == std::string::npos,
                  "the allreduce ended: " << e.what());
        }
        rt->enqueue(j)->wait(std::chrono::seconds(30));
      });
}

TEST(RuntimeKinds, ProcessSetsRunOnTheirMembersOnly) {
  RankSpec spec;
  spec.size = 4;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        int even = rt->addProcessSet({0, 2});
        int odd = rt->addProcessSet({3, 1});
        REQUIRE(even != odd && even > 0, "ids " << even << " " << odd);
        int mine = ctx.rank % 2 == 0 ? even : odd;
        for (int step = 0; step < 3; ++step) {
          auto s = filledFloats(6, static_cast<float>(ctx.rank));
          auto m = filledFloats(6, static_cast<float>(ctx.rank));
          auto hs = rt->enqueue(allreduceOf("x", s, ReduceOp::kSum, mine));
          auto hm = rt->enqueue(allreduceOf("y", m, ReduceOp::kMin, mine));
          Request b;
          b.kind = RequestKind::kBroadcast;
          b.name = "b";
          b.process_set = mine;
          b.root = 1;  // the set's second member: rank 2 or rank 3
          b.input = b.output = filledFloats(3, static_cast<float>(ctx.rank * 10));
          auto hb = rt->enqueue(b);
          hs->wait();
          hm->wait();
          hb->wait();
          float sum = ctx.rank % 2 == 0 ? 2.0f : 4.0f;
          float min = ctx.rank % 2 == 0 ? 0.0f : 1.0f;
          REQUIRE(s->as<float>()[1] == sum + 2.0f, "set sum " << s->as<float>()[1]);
          REQUIRE(m->as<float>()[1] == min + 1.0f, "set min " << m->as<float>()[1]);
          float root_value = ctx.rank % 2 == 0 ? 20.0f : 30.0f;
          REQUIRE(std::static_pointer_cast<HostTensor>(b.input)->as<float>()[0] == root_value,
                  "set broadcast");
        }
        // A world allreduce still spans everyone.
        auto w = filledFloats(2, 1.0f);
        rt->enqueue(allreduceOf("w", w))->wait();
        REQUIRE(w->as<float>()[0] == 4.0f, "world");
        rt->removeProcessSet(even);
        rt->removeProcessSet(odd);
        bool threw = false;
        try {
          rt->enqueue(allreduceOf("x", filledFloats(2, 1.0f), ReduceOp::kSum, mine));
        } catch (const Error& e) {
          threw = e.code() == ErrorCode::kInvalidArgument;
        }
        REQUIRE(threw, "a removed set is refused");
      });
}

TEST(RuntimeKinds, GroupsScalingAndMixedDtypesFuse) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        for (int step = 0; step < 3; ++step) {
          std::vector<Request> group;
          std::vector<std::shared_ptr<HostTensor>> tensors;
          for (int i = 0; i < 6; ++i) {
            DataType type = i % 2 ? DataType::kFloat16 : DataType::kFloat32;
            auto t = std::make_shared<HostTensor>(type, std::vector<int64_t>{4 + i});
            for (int e = 0; e < 4 + i; ++e) {
              if (type == DataType::kFloat16) {
                t->as<_Float16>()[e] = static_cast<_Float16>(e + ctx.rank);
              } else {
                t->as<float>()[e] = static_cast<float>(e + ctx.rank);
              }
            }
            Request r = allreduceOf("g" + std::to_string(i), t, ReduceOp::kAverage);
            r.scaling.prescale = 4.0;
            r.scaling.postscale = 0.5;
            tensors.push_back(t);
            group.push_back(r);
          }
          auto handles =
              step == 1 ? rt->enqueueGroup(group) : std::vector<std::shared_ptr<Handle>>{};
          if (step != 1) {
            for (Request& r : group) handles.push_back(rt->enqueue(r));
          }
          for (auto& h : handles) h->wait(std::chrono::seconds(30));
          for (int i = 0; i < 6; ++i) {
            for (int e = 0; e < 4 + i; ++e) {
              double got = i % 2 ? static_cast<double>(tensors[i]->as<_Float16>()[e])
                                 : tensors[i]->as<float>()[e];
              double want = 2.0 * (e + 0.5);  // mean(e + r) * 4 * 0.5
              REQUIRE(std::fabs(got - want) < 1e-3,
                      "tensor " << i << " element " << e << ": " << got << " != " << want);
            }
          }
        }
      });
}

TEST(RuntimeKinds, KnobsChangedWhileRunningFollowRankZero) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        for (int step = 0; step < 12; ++step) {
          // Ranks ask for different values; rank 0's must win everywhere or the plans would differ.
          if (step % 3 == 0) rt->setFusionThreshold((ctx.rank + step) % 2 ? 0 : 64 * (step + 1));
          if (step == 5) rt->setCycleTime(0.5 + ctx.rank);
          std::vector<std::shared_ptr<HostTensor>> tensors;
          std::vector<std::shared_ptr<Handle>> handles;
          for (int i = 0; i < 20; ++i) {
            auto t = filledFloats(static_cast<size_t>(3 + i), static_cast<float>(ctx.rank));
            tensors.push_back(t);
            handles.push_back(rt->enqueue(allreduceOf("k" + std::to_string(i), t)));
          }
          for (auto& h : handles) h->wait(std::chrono::seconds(30));
          for (int i = 0; i < 20; ++i)
            REQUIRE(tensors[i]->as<float>()[2] == 3.0f + 6.0f, "knobs step " << step);
        }
      });
}

TEST(RuntimeKinds, TensorsAboveTheLargestFusedSizeRunAloneAsRankZeroSays) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        // A world whose ranks ask for different limits: rank 0's 4 KiB must hold everywhere,
        // or the ranks would plan different collectives and hang or mix tensors up.
        rt->shutdown();
        rt.reset();
        Settings settings = runtimeTestSettings();
        settings.fusion_max_tensor_bytes = ctx.rank == 0 ? 4096 : 64 * ctx.rank;
        rt = Runtime::init(settings, ctx.communicator("limits", ctx.rank, ctx.size));
        for (int step = 0; step < 3; ++step) {
          // 5 small (at most 4 KiB) and 3 large tensors of floats, in one cycle.
          const std::vector<size_t> sizes = {7, 1024, 3000, 100, 1500, 1, 2048, 9};
          std::vector<std::shared_ptr<HostTensor>> tensors;
          std::vector<Request> requests;
          for (size_t i = 0; i < sizes.size(); ++i) {
            tensors.push_back(filledFloats(sizes[i], static_cast<float>(ctx.rank + step)));
            requests.push_back(allreduceOf("limit." + std::to_string(i), tensors.back()));
          }
          RuntimeStats before = rt->stats();
          auto handles = rt->enqueueGroup(requests);
          for (auto& h : handles) h->wait(std::chrono::seconds(30));
          const RuntimeStats after = statsAfter(*rt, before, 8);
          REQUIRE(after.collectives - before.collectives == 4,
                  "one fused allreduce and three alone, not "
                      << after.collectives - before.collectives);
          for (size_t i = 0; i < sizes.size(); ++i) {
            for (size_t e = 0; e < sizes[i]; e += 97) {
              // sum over ranks of (rank + step + e)
              const float want = static_cast<float>(3 * (step + e) + 3);
              REQUIRE(tensors[i]->as<float>()[e] == want,
                      "tensor " << i << " element " << e << ": " << tensors[i]->as<float>()[e]);
            }
          }
        }
      });
}

TEST(RuntimeKinds, AllgathersAndBroadcastsFuse) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        for (int step = 0; step < 4; ++step) {
          std::vector<std::shared_ptr<Handle>> gathers, casts;
          std::vector<std::shared_ptr<HostTensor>> cast_tensors;
          RuntimeStats before = rt->stats();
          std::vector<Request> requests;
          for (int k = 0; k < 5; ++k) {
            // Rank r gives (r + k) % 3 rows of 2: value 1000 k + 100 r + element.
            int64_t rows = (ctx.rank + k) % 3;
            auto t = std::make_shared<HostTensor>(DataType::kInt32, std::vector<int64_t>{rows, 2});
            for (int64_t e = 0; e < rows * 2; ++e)
              t->as<int32_t>()[e] = static_cast<int32_t>(1000 * k + 100 * ctx.rank + e);
            Request g;
            g.kind = RequestKind::kAllgather;
            g.name = "gather." + std::to_string(k);
            g.input = t;
            requests.push_back(g);
          }
          for (int k = 0; k < 4; ++k) {
            auto t = filledFloats(static_cast<size_t>(3 + k),
                                  ctx.rank == 1 ? static_cast<float>(10 * k) : -1.0f);
            cast_tensors.push_back(t);
            Request b;
            b.kind = RequestKind::kBroadcast;
            b.name = "cast." + std::to_string(k);
            b.input = b.output = t;
            b.root = 1;
            requests.push_back(b);
          }
          auto handles = rt->enqueueGroup(requests);  // all in one cycle, so they can fuse
          for (auto& h : handles) h->wait(std::chrono::seconds(30));
          const RuntimeStats after = statsAfter(*rt, before, 9);
          REQUIRE(
              after.collectives - before.collectives == 2,
              "one allgather and one broadcast, not " << after.collectives - before.collectives);
          for (int k = 0; k < 5; ++k) {
            const int32_t* out =
                static_cast<const int32_t*>(handles[static_cast<size_t>(k)]->output()->data());
            size_t at = 0;
            for (int r = 0; r < ctx.size; ++r) {
              for (int64_t e = 0; e < ((r + k) % 3) * 2; ++e, ++at) {
                REQUIRE(out[at] == 1000 * k + 100 * r + e,
                        "gather " << k << " from rank " << r << " element " << e);
              }
            }
            REQUIRE(handles[static_cast<size_t>(k)]->output()->numel() == at, "gather size");
          }
          for (int k = 0; k < 4; ++k) {
            for (int e = 0; e < 3 + k; ++e) {
              REQUIRE(cast_tensors[static_cast<size_t>(k)]->as<float>()[e] ==
                          static_cast<float>(10 * k + e),
                      "broadcast " << k);
            }
          }
        }
      });
}

// Reducescatters submitted together fuse per dtype, op and scaling into one collective each,
// and every rank's share of every tensor matches a reference computed here: rows that do not
// divide among the ranks, a tensor smaller than the job (empty shares), 1-D and 2-D shapes,
// scaling, averages and max. The second step sends each tensor on its own, unfused.
TEST(RuntimeKinds, ReducescattersFuseAndEveryShareMatchesTheReference) {
  struct Spec {
    DataType type;
    int64_t rows, cols;
    ReduceOp op;
    double prescale, postscale;
  };
  const std::vector<Spec> specs{
      {DataType::kFloat32, 7, 2, ReduceOp::kSum, 0.5, 0.25},
      {DataType::kFloat32, 1, 3, ReduceOp::kSum, 0.5, 0.25},  // ranks 1 and 2 get no rows
      {DataType::kFloat32, 9, 1, ReduceOp::kSum, 0.5, 0.25},
      {DataType::kFloat32, 4, 5, ReduceOp::kSum, 0.5, 0.25},
      {DataType::kFloat64, 5, 3, ReduceOp::kAverage, 1.0, 1.0},
      {DataType::kFloat64, 8, 1, ReduceOp::kAverage, 1.0, 1.0},
      {DataType::kInt32, 5, 0, ReduceOp::kMax, 1.0, 1.0},  // cols 0: a 1-D tensor of 5
      {DataType::kInt32, 11, 0, ReduceOp::kMax, 1.0, 1.0},
  };
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        const int n = ctx.size;
        // Element e of tensor k on rank r: small integers, so float sums are exact.
        auto value = [](size_t k, int r, int64_t e) {
          return static_cast<double>((7 * static_cast<int64_t>(k) + 3 * r + e * (r + 1)) % 23);
        };
        for (int step = 0; step < 2; ++step) {
          std::vector<Request> requests;
          for (size_t k = 0; k < specs.size(); ++k) {
            const Spec& sp = specs[k];
            std::vector<int64_t> shape{sp.rows};
            if (sp.cols > 0) shape.push_back(sp.cols);
            auto t = std::make_shared<HostTensor>(sp.type, shape);
            for (int64_t e = 0; e < static_cast<int64_t>(t->numel()); ++e) {
              const double v = value(k, ctx.rank, e);
              if (sp.type == DataType::kFloat32) t->as<float>()[e] = static_cast<float>(v);
              if (sp.type == DataType::kFloat64) t->as<double>()[e] = v;
              if (sp.type == DataType::kInt32) t->as<int32_t>()[e] = static_cast<int32_t>(v);
            }
            Request r;
            r.kind = RequestKind::kReducescatter;
            r.name = "rs." + std::to_string(k);
            r.input = t;
            r.op = sp.op;
            r.scaling.prescale = sp.prescale;
            r.scaling.postscale = sp.postscale;
            requests.push_back(r);
          }
          RuntimeStats before = rt->stats();
          std::vector<std::shared_ptr<Handle>> handles;
          if (step == 0) {
            handles = rt->enqueueGroup(requests);  // one cycle: they may fuse
          } else {
            for (Request& r : requests) {
              handles.push_back(rt->enqueue(r));
              handles.back()->wait(std::chrono::seconds(30));  // one cycle each
            }
          }
          for (auto& h : handles) h->wait(std::chrono::seconds(30));
          const RuntimeStats after = statsAfter(*rt, before, specs.size());
          const uint64_t expected = step == 0 ? 3 : specs.size();
          REQUIRE(after.collectives - before.collectives == expected,
                  "step " << step << ": " << after.collectives - before.collectives
                          << " collectives, expected " << expected);
          for (size_t k = 0; k < specs.size(); ++k) {
            const Spec& sp = specs[k];
            const int64_t row = sp.cols > 0 ? sp.cols : 1;
            int64_t first_row = 0;
            for (int r = 0; r < ctx.rank; ++r) first_row += sp.rows / n + (r < sp.rows % n);
            const int64_t my_rows = sp.rows / n + (ctx.rank < sp.rows % n);
            Tensor& out = *handles[k]->output();
            REQUIRE(out.shape()[0] == my_rows, "tensor " << k << " rows " << out.shape()[0]);
            REQUIRE(static_cast<int64_t>(out.numel()) == my_rows * row,
                    "tensor " << k << " size " << out.numel());
            for (int64_t i = 0; i < my_rows * row; ++i) {
              const int64_t e = first_row * row + i;
              double want = sp.op == ReduceOp::kMax ? -1e300 : 0.0;
              for (int r = 0; r < n; ++r) {
                const double v = sp.prescale * value(k, r, e);
                want = sp.op == ReduceOp::kMax ? std::max(want, v) : want + v;
              }
              if (sp.op == ReduceOp::kAverage) want /= n;
              want *= sp.postscale;
              double got = 0;
              if (sp.type == DataType::kFloat32) got = static_cast<const float*>(out.data())[i];
              if (sp.type == DataType::kFloat64) got = static_cast<const double*>(out.data())[i];
              if (sp.type == DataType::kInt32) got = static_cast<const int32_t*>(out.data())[i];
              REQUIRE(std::fabs(got - want) < 1e-9,
                      "step " << step << " tensor " << k << " element " << i << ": " << got
                              << " != " << want);
            }
          }
        }
      });
}

TEST(RuntimeKinds, ProcessSetsGivenAtInit) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        rt->shutdown();
        rt = Runtime::init(runtimeTestSettings(), ctx.communicator("with-sets", ctx.rank, 3),
                           {{0, 1}, {2, 1}});
        int set = ctx.rank == 0 ? 1 : 2;  // rank 1 is in both
        for (int id : {1, 2}) {
          if (ctx.rank != 1 && id != set) continue;
          auto t = filledFloats(3, static_cast<float>(ctx.rank));
          rt->enqueue(allreduceOf("s", t, ReduceOp::kSum, id))->wait(std::chrono::seconds(30));
          float want = id == 1 ? 1.0f : 3.0f;
          REQUIRE(t->as<float>()[0] == want, "set " << id << ": " << t->as<float>()[0]);
        }
        Request barrier;  // one rank's shutdown stops all: let everyone finish first
        barrier.kind = RequestKind::kBarrier;
        rt->enqueue(barrier)->wait(std::chrono::seconds(30));
        rt->shutdown();
        // Ranks that disagree on the list all fail at init.
        std::vector<std::vector<int>> sets = {{0, 1}};
        if (ctx.rank == 2) sets = {{0, 2}};
        bool mismatch = false;
        try {
          Runtime::init(runtimeTestSettings(), ctx.communicator("differing", ctx.rank, 3), sets);
        } catch (const Error& e) {
          mismatch = e.code() == ErrorCode::kMismatch;
        }
        REQUIRE(mismatch, "differing process sets at init are a mismatch on rank " << ctx.rank);
        rt.reset();
      });
}

}  // namespace
}  // namespace ronde::testing
