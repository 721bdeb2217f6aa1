// The runtime end to end: named requests from several threads in different orders, each kind
// of collective, duplicate names, shutdown and a second init over a different world.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t,
                    ReduceOp op = ReduceOp::kSum) {
  Request r;
  r.kind = RequestKind::kAllreduce;
  r.name = name;
  r.input = t;
  r.output = t;
  r.op = op;
  return r;
}

class RuntimeWorlds : public ::testing::TestWithParam<int> {};

TEST_P(RuntimeWorlds, AllreduceInDifferentOrdersFromSeveralThreads) {
  RankSpec spec;
  spec.size = GetParam();
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        constexpr int kTensors = 24;
        for (int step = 0; step < 5; ++step) {
          std::vector<int> order(kTensors);
          for (int i = 0; i < kTensors; ++i) order[static_cast<size_t>(i)] = i;
          std::mt19937 rng(static_cast<unsigned>(ctx.rank * 100 + step));
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<std::shared_ptr<HostTensor>> tensors(kTensors);
          std::vector<std::shared_ptr<Handle>> handles(kTensors);
          std::vector<std::thread> threads;
          for (int t = 0; t < 3; ++t) {
            threads.emplace_back([&, t] {
              for (size_t k = static_cast<size_t>(t); k < order.size(); k += 3) {
                int i = order[k];
                size_t n = static_cast<size_t>(1 + i * 37);
                auto tensor = filledFloats(n, static_cast<float>(ctx.rank + i));
                tensors[static_cast<size_t>(i)] = tensor;
                handles[static_cast<size_t>(i)] =
                    rt->enqueue(allreduceOf("t" + std::to_string(i), tensor));
              }
            });
          }
          for (auto& th : threads) th.join();
          for (int i = 0; i < kTensors; ++i) {
            handles[static_cast<size_t>(i)]->wait();
            const float* got = tensors[static_cast<size_t>(i)]->as<float>();
            size_t n = static_cast<size_t>(1 + i * 37);
            for (size_t e = 0; e < n; e += 7) {
              // sum over ranks of (rank + i + e)
              float want = static_cast<float>(ctx.size * (i + static_cast<int>(e)) +
                                              ctx.size * (ctx.size - 1) / 2);
              REQUIRE(got[e] == want,
                      "tensor " << i << " element " << e << ": " << got[e] << " != " << want);
            }
          }
        }
      });
}

TEST_P(RuntimeWorlds, AllgatherBroadcastBarrierAverage) {
  RankSpec spec;
  spec.size = GetParam();
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        // Allgather: rank r contributes r+1 rows of 3 elements.
        auto in =
            std::make_shared<HostTensor>(DataType::kInt32, std::vector<int64_t>{ctx.rank + 1, 3});
        for (int i = 0; i < (ctx.rank + 1) * 3; ++i) in->as<int32_t>()[i] = ctx.rank * 1000 + i;
        Request g;
        g.kind = RequestKind::kAllgather;
        g.name = "gather";
        g.input = in;
        auto hg = rt->enqueue(g);

        auto b = filledFloats(10, ctx.rank == ctx.size - 1 ? 42.0f : -1.0f);
        Request br;
        br.kind = RequestKind::kBroadcast;
        br.name = "bcast";
        br.input = b;
        br.root = ctx.size - 1;
        auto hb = rt->enqueue(br);

        auto avg = filledFloats(5, static_cast<float>(ctx.rank * 2));
        auto ha = rt->enqueue(allreduceOf("avg", avg, ReduceOp::kAverage));
        Request bar;
        bar.kind = RequestKind::kBarrier;
        auto hbar = rt->enqueue(bar);

        hg->wait();
        auto out = hg->output();
        int64_t rows = ctx.size * (ctx.size + 1) / 2;
        REQUIRE(out->shape() == (std::vector<int64_t>{rows, 3}), "allgather shape");
        const int32_t* o = static_cast<const int32_t*>(out->data());
        size_t at = 0;
        for (int r = 0; r < ctx.size; ++r) {
          for (int i = 0; i < (r + 1) * 3; ++i)
            REQUIRE(o[at++] == r * 1000 + i, "allgather value at " << at);
        }
        hb->wait();
        for (int i = 0; i < 10; ++i)
          REQUIRE(b->as<float>()[i] == 42.0f + static_cast<float>(i), "broadcast");
        ha->wait();
        float mean = static_cast<float>(ctx.size - 1);  // mean of 2r over ranks
        for (int i = 0; i < 5; ++i)
          REQUIRE(avg->as<float>()[i] == mean + static_cast<float>(i),
                  "average " << avg->as<float>()[i]);
        hbar->wait();
      });
}

INSTANTIATE_TEST_SUITE_P(Sizes, RuntimeWorlds, ::testing::Values(1, 2, 3, 4));

TEST(Runtime, DuplicateNameInFlightIsAnImmediateError) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        auto t = filledFloats(4, 1.0f);
        std::shared_ptr<Handle> first;
        if (ctx.rank == 0) {
          first = rt->enqueue(allreduceOf("dup", t));
          bool threw = false;
          try {
            rt->enqueue(allreduceOf("dup", filledFloats(4, 1.0f)));
          } catch (const Error& e) {
            threw = e.code() == ErrorCode::kInvalidArgument &&
                    std::string(e.what()).find("'dup'") != std::string::npos;
          }
          REQUIRE(threw, "a second 'dup' in flight must throw kInvalidArgument at once");
        }
        // Rank 1 submits late: rank 0's request waits meanwhile.
        if (ctx.rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          first = rt->enqueue(allreduceOf("dup", t));
        }
        first->wait();
        REQUIRE(t->as<float>()[0] == 2.0f, "dup result");
        // Once complete, the name is free again. Rank 0's refused request left a notice that
        // took its turn of the name: rank 1's next request of it meets the notice and fails
        // (deterministically, whichever rank submits first), and the turn after that pairs
        // the two ranks' next requests again (docs/runtime.md, "Refusal notices").
        std::shared_ptr<Handle> again;
        if (ctx.rank == 1) {
          std::string error;
          try {
            rt->enqueue(allreduceOf("dup", t))->wait(std::chrono::seconds(60));
          } catch (const Error& e) {
            error = e.code() == ErrorCode::kInvalidArgument ? e.what() : "";
          }
          REQUIRE(error.find("submitted again on rank(s) 0") != std::string::npos,
                  "rank 1's request in the turn of rank 0's refused one: '" << error << "'");
          REQUIRE(t->as<float>()[0] == 2.0f, "a failed request leaves its tensor alone");
        }
        again = rt->enqueue(allreduceOf("dup", t));
        again->wait();
        REQUIRE(t->as<float>()[0] == 4.0f, "second dup result");
      });
}

TEST(Runtime, ShutdownThenInitAgainWithADifferentWorld) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        auto t = filledFloats(8, 1.0f);
        rt->enqueue(allreduceOf("x", t))->wait();
        REQUIRE(t->as<float>()[0] == 3.0f, "world of 3");
        rt->shutdown();
        REQUIRE(!rt->isInitialized(), "after shutdown");
        bool threw = false;
        try {
          rt->enqueue(allreduceOf("y", t));
        } catch (const Error& e) {
          threw = e.code() == ErrorCode::kAborted;
        }
        REQUIRE(threw, "enqueue after shutdown throws kAborted");
        rt.reset();
        if (ctx.rank == 2) return;
        rt = Runtime::init(runtimeTestSettings(), ctx.communicator("second", ctx.rank, 2));
        REQUIRE(rt->size() == 2 && rt->rank() == ctx.rank, "second world");
        auto u = filledFloats(8, 1.0f);
        rt->enqueue(allreduceOf("x", u))->wait();
        REQUIRE(u->as<float>()[0] == 2.0f, "world of 2: " << u->as<float>()[0]);
      });
}

TEST(Runtime, OneRankShuttingDownStopsTheOthersCleanly) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        if (ctx.rank == 0) {
          rt->shutdown();
          return;
        }
        // Either the request is refused (the runtime already stopped) or its handle fails.
        bool threw = false;
        try {
          rt->enqueue(allreduceOf("never", filledFloats(4, 1.0f)))->wait(std::chrono::seconds(30));
        } catch (const Error& e) {
          threw = e.code() == ErrorCode::kAborted &&
                  std::string(e.what()).find("rank 0") != std::string::npos;
        }
        REQUIRE(threw, "the pending request fails with kAborted naming rank 0");
      });
}

TEST(Runtime, ShutdownWhileThreadsKeepSubmitting) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        std::atomic<int> completed{0}, refused{0}, failed{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; ++t) {
          threads.emplace_back([&, t] {
            for (int i = 0;; ++i) {
              try {
                auto tensor = filledFloats(static_cast<size_t>(1 + (i * 7 + t) % 300), 1.0f);
                auto h = rt->enqueue(
                    allreduceOf("t" + std::to_string(t) + "." + std::to_string(i % 5), tensor));
                h->wait(std::chrono::seconds(30));
                ++completed;
              } catch (const Error& e) {
                if (e.code() != ErrorCode::kAborted) throw;
                // Refused at enqueue once stopped, or failed while pending: either ends the loop.
                (rt->isInitialized() ? failed : refused)++;
                if (!rt->isInitialized()) return;
              }
            }
          });
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        if (ctx.rank == 1) rt->shutdown();
        for (auto& th : threads) th.join();
        REQUIRE(!rt->isInitialized(), "stopped");
        REQUIRE(completed.load() > 0, "some requests completed before the shutdown");
        rt->shutdown();
      });
}

// on_done, the completion callback of asynchronous frontends (TensorFlow's kernels): called
// once per request with its handle, already done, whose wait() returns on success and throws
// the request's error on failure (a mismatch, a peer's shutdown); it may submit the next
// request from inside itself, as a frontend's scheduler may, without a deadlock.
TEST(Runtime, CompletionCallbacksRunOnceAfterTheHandleIsDoneAndMaySubmit) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        struct Seen {
          std::mutex mutex;
          std::condition_variable changed;
          std::map<std::string, std::shared_ptr<Handle>> handles;  // set once enqueue returns
          std::vector<std::string> calls;  // "<name>:ok" or "<name>:<error code>"
        };
        auto seen = std::make_shared<Seen>();
        auto record = [seen](const std::string& name) {
          return [seen, name](Handle& done) {
            std::string what = name + ":ok";
            if (!done.poll()) what += ":not-done";
            try {
              done.wait(Duration::zero());  // done: returns or throws at once
            } catch (const Error& e) {
              what = name + ":" + std::to_string(static_cast<int>(e.code()));
            }
            std::lock_guard<std::mutex> lock(seen->mutex);
            auto it = seen->handles.find(name);  // absent if enqueue has not returned yet
            if (it != seen->handles.end() && it->second.get() != &done) what += ":other-handle";
            seen->calls.push_back(what);
            seen->changed.notify_all();
          };
        };
        auto submitted = [seen](const std::string& name, std::shared_ptr<Handle> handle) {
          std::lock_guard<std::mutex> lock(seen->mutex);
          seen->handles[name] = std::move(handle);
        };
        auto waitFor = [&](size_t count) {
          std::unique_lock<std::mutex> lock(seen->mutex);
          REQUIRE(seen->changed.wait_for(lock, std::chrono::seconds(30),
                                         [&] { return seen->calls.size() >= count; }),
                  "completion callbacks missing");
        };
        auto codeOf = [](ErrorCode code) { return std::to_string(static_cast<int>(code)); };

        // A chain: the first callback submits the second request from the runtime's thread.
        auto chained = filledFloats(4, 1.0f);
        Request next = allreduceOf("chain.2", chained);
        next.on_done = record("chain.2");
        Runtime* runtime = rt.get();
        Request first = allreduceOf("chain.1", chained);
        first.on_done = [on_first = record("chain.1"), runtime, next,
                         submitted](Handle& done) mutable {
          on_first(done);
          submitted("chain.2", runtime->enqueue(std::move(next)));
        };
        submitted("chain.1", rt->enqueue(std::move(first)));
        waitFor(2);
        REQUIRE(chained->as<float>()[3] == 16.0f, "two allreduces of 2 ranks: 4 x 4");

        // A mismatch fails the request on every rank: the callback gets its error.
        Request bad = allreduceOf("mismatch", filledFloats(ctx.rank == 0 ? 3 : 5, 1.0f));
        bad.on_done = record("mismatch");
        submitted("mismatch", rt->enqueue(std::move(bad)));
        waitFor(3);
        Request meet;
        meet.kind = RequestKind::kBarrier;
        meet.name = "meet";
        rt->enqueue(meet)->wait(std::chrono::seconds(30));

        std::vector<std::string> expected = {"chain.1:ok", "chain.2:ok",
                                             "mismatch:" + codeOf(ErrorCode::kMismatch)};
        // Rank 0 shuts down; rank 1's next request fails (or is refused at once, and then
        // its callback must not run).
        if (ctx.rank == 0) {
          rt->shutdown();
        } else {
          Request lone = allreduceOf("lone", filledFloats(2, 1.0f));
          lone.on_done = record("lone");
          try {
            submitted("lone", rt->enqueue(std::move(lone)));
            waitFor(4);
            expected.push_back("lone:" + codeOf(ErrorCode::kAborted));
          } catch (const Error& e) {
            REQUIRE(e.code() == ErrorCode::kAborted, "refused as aborted");
          }
        }
        std::lock_guard<std::mutex> lock(seen->mutex);
        std::string got;
        for (const auto& call : seen->calls) got += call + " ";
        REQUIRE(seen->calls == expected, "callbacks: got " + got);
      });
}

// Runtime::stats() counts a request by the time its handle completes: read from the request's
// own completion callback (on the runtime's thread, the moment the handle is done), the
// counters already hold it and the collective that ran it. A fused pair counts two responses
// and one collective.
TEST(Runtime, StatsCountARequestByTheTimeItsHandleCompletes) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext&) {
        Runtime* runtime = rt.get();
        const RuntimeStats before = rt->stats();
        struct Seen {
          std::mutex mutex;
          std::condition_variable changed;
          std::vector<RuntimeStats> stats;  // what each callback read
        };
        auto seen = std::make_shared<Seen>();
        std::vector<Request> pair;
        for (const char* name : {"pair.a", "pair.b"}) {
          pair.push_back(allreduceOf(name, filledFloats(8, 1.0f)));
          pair.back().on_done = [runtime, seen](Handle&) {
            const RuntimeStats now = runtime->stats();
            std::lock_guard<std::mutex> lock(seen->mutex);
            seen->stats.push_back(now);
            seen->changed.notify_all();
          };
        }
        rt->enqueueGroup(std::move(pair));
        std::unique_lock<std::mutex> lock(seen->mutex);
        REQUIRE(seen->changed.wait_for(lock, std::chrono::seconds(30),
                                       [&] { return seen->stats.size() == 2; }),
                "both callbacks ran");
        for (const RuntimeStats& at_done : seen->stats) {
          REQUIRE(at_done.responses - before.responses == 2,
                  "responses counted when the handle completed: "
                      << at_done.responses - before.responses << " of 2");
          REQUIRE(at_done.collectives - before.collectives == 1,
                  "collectives counted when the handle completed: "
                      << at_done.collectives - before.collectives << " of 1");
        }
        lock.unlock();
        rt->shutdown();
      });
}

}  // namespace
}  // namespace ronde::testing
