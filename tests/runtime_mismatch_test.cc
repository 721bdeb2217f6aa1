// Every kind of disagreement between ranks fails the request on every rank, with a message
// naming the tensor, the ranks and the values, and the runtime keeps working afterwards.
#include <gtest/gtest.h>

#include "runtime/device_host_memory.h"
#include "runtime/runtime_impl.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

class DeviceTensor : public HostTensor {
 public:
  using HostTensor::HostTensor;
  Device device() const override { return {Device::Kind::kCuda, 0}; }
};

struct MismatchCase {
  const char* label;
  // Builds rank r's request named "m".
  std::function<Request(int rank)> request;
  std::vector<std::string> expected;  // substrings of the error message
};

Request base(int rank) {
  Request r;
  r.name = "m";
  r.input = filledFloats(6, 1.0f);
  r.output = r.input;
  return r;
}

std::vector<MismatchCase> cases() {
  return {
      {"shape",
       [](int rank) {
         Request r = base(rank);
         if (rank == 1) r.input = r.output = filledFloats(7, 1.0f);
         return r;
       },
       {"shape mismatch", "ranks 0, 2 have [6]", "rank 1 has [7]"}},
      {"dtype",
       [](int rank) {
         Request r = base(rank);
         if (rank == 1)
           r.input = r.output =
               std::make_shared<HostTensor>(DataType::kFloat64, std::vector<int64_t>{6});
         return r;
       },
       {"dtype mismatch", "float32", "float64"}},
      {"op",
       [](int rank) {
         Request r = base(rank);
         if (rank == 1) r.op = ReduceOp::kMax;
         return r;
       },
       {"op mismatch", "sum", "max"}},
      {"prescale",
       [](int rank) {
         Request r = base(rank);
         if (rank == 1) r.scaling.prescale = 0.5;
         return r;
       },
       {"prescale factor mismatch", "0.5"}},
      {"postscale",
       [](int rank) {
         Request r = base(rank);
         if (rank == 0) r.scaling.postscale = 3;
         return r;
       },
       {"postscale factor mismatch", "rank 0 has 3"}},
      {"root",
       [](int rank) {
         Request r = base(rank);
         r.kind = RequestKind::kBroadcast;
         r.root = rank == 1 ? 1 : 0;
         return r;
       },
       {"root rank mismatch", "rank 1 has 1"}},
      {"kind",
       [](int rank) {
         Request r = base(rank);
         if (rank == 1) {
           r.kind = RequestKind::kAllgather;
           r.output = nullptr;
         }
         return r;
       },
       {"kind mismatch", "allreduce", "allgather"}},
      {"kind under kind-scoped names",  // Horovod's frontends name requests "<kind>.<name>"
       [](int rank) {
         Request r = base(rank);
         r.name = "allreduce.m";
         if (rank == 1) {
           r.kind = RequestKind::kAllgather;
           r.output = nullptr;
           r.name = "allgather.m";
         }
         return r;
       },
       {"kind mismatch", "ranks 0, 2 have allreduce", "rank 1 has allgather", "'allgather.m'"}},
      {"device",
       [](int rank) {
         Request r = base(rank);
         if (rank == 1)
           r.input = r.output =
               std::make_shared<DeviceTensor>(DataType::kFloat32, std::vector<int64_t>{6});
         return r;
       },
       {"device mismatch", "cpu", "cuda"}},
      {"allgather trailing dims",
       [](int rank) {
         Request r;
         r.kind = RequestKind::kAllgather;
         r.name = "m";
         r.input =
             std::make_shared<HostTensor>(DataType::kFloat32, std::vector<int64_t>{2, rank + 2});
         return r;
       },
       {"shape (beyond the first dimension) mismatch", "[2]", "[3]"}},
  };
}

class RuntimeMismatch : public ::testing::TestWithParam<int> {};

TEST_P(RuntimeMismatch, FailsOnEveryRankAndTheRuntimeGoesOn) {
  MismatchCase c = cases()[static_cast<size_t>(GetParam())];
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        if (std::string(c.label) == "device") {
          // A runtime that takes the CUDA tensor at enqueue on a machine without a GPU: its
          // devices are host memory (runtime/device_host_memory.h).
          rt->shutdown();
          rt = std::make_unique<runtime::RuntimeImpl>(
              runtimeTestSettings(), ctx.communicator("devices", ctx.rank, ctx.size),
              std::vector<std::vector<int>>{}, runtime::hostMemoryDevices());
        }
        for (int round = 0; round < 2; ++round) {  // the second round meets the cache
          auto h = rt->enqueue(c.request(ctx.rank));
          std::string message;
          try {
            h->wait(std::chrono::seconds(30));
          } catch (const Error& e) {
            REQUIRE(e.code() == ErrorCode::kMismatch,
                    c.label << ": code " << errorCodeName(e.code()) << ": " << e.what());
            message = e.what();
          }
          REQUIRE(!message.empty(), c.label << ": no error on rank " << ctx.rank);
          REQUIRE(message.find("'m'") != std::string::npos, "names the tensor: " << message);
          for (const std::string& s : c.expected) {
            REQUIRE(message.find(s) != std::string::npos,
                    c.label << ": '" << s << "' missing in: " << message);
          }
          auto t = filledFloats(3, 1.0f);
          Request ok;
          ok.name = "after";
          ok.input = ok.output = t;
          rt->enqueue(ok)->wait(std::chrono::seconds(30));
          REQUIRE(t->as<float>()[0] == 3.0f, "the runtime works after a mismatch");
        }
      });
}

INSTANTIATE_TEST_SUITE_P(Cases, RuntimeMismatch,
                         ::testing::Range(0, static_cast<int>(cases().size())),
                         [](const auto& info) {
                           std::string name = cases()[static_cast<size_t>(info.param)].label;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(RuntimeMismatch, ATensorIsInFlightOnceWhateverItsKindButAutomaticNamesNeverClash) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        auto barrier = [&](const char* name) {
          Request b;
          b.kind = RequestKind::kBarrier;
          b.name = name;
          rt->enqueue(b)->wait(std::chrono::seconds(30));
        };
        // Each rank in turn submits an allreduce and tries an allgather of the same tensor
        // while its peer holds its own allreduce back until the turn's barrier, which the
        // checking rank enters only after the check: however the threads are scheduled, the
        // allreduce cannot complete in between.
        std::vector<Request> reduces;
        std::vector<std::shared_ptr<Handle>> handles;
        reduces.reserve(2);
        Request gather;
        for (int checking = 0; checking < 2; ++checking) {
          const std::string tensor = "t" + std::to_string(checking);
          Request& reduce = reduces.emplace_back(base(ctx.rank));
          reduce.name = "allreduce." + tensor;
          gather = Request{};
          gather.kind = RequestKind::kAllgather;
          gather.name = "allgather." + tensor;
          gather.input = filledFloats(2, 1.0f);
          if (ctx.rank != checking) {
            barrier(("turn." + tensor).c_str());
            handles.push_back(rt->enqueue(reduce));
            continue;
          }
          handles.push_back(rt->enqueue(reduce));
          bool refused = false;
          try {
            rt->enqueue(gather);
          } catch (const Error& e) {
            refused = e.code() == ErrorCode::kInvalidArgument &&
                      std::string(e.what()).find("already in flight") != std::string::npos;
          }
          REQUIRE(refused, "a second kind of tensor " + tensor +
                               " was accepted while one is in flight");
          barrier(("turn." + tensor).c_str());
        }
        for (size_t i = 0; i < handles.size(); ++i) {
          handles[i]->wait(std::chrono::seconds(30));
          REQUIRE(std::static_pointer_cast<HostTensor>(reduces[i].input)->as<float>()[1] == 4.0f,
                  "allreduce result");
        }
        // Free again once it completed. Each refusal took its rank's turn of the name: the
        // other rank's next request of it meets that turn and fails, whichever submits first;
        // the turn after pairs the two ranks' requests again.
        for (int checking = 0; checking < 2; ++checking) {
          Request again = gather;
          again.name = "allgather.t" + std::to_string(checking);
          if (ctx.rank != checking) {
            std::string error;
            try {
              rt->enqueue(again)->wait(std::chrono::seconds(30));
            } catch (const Error& e) {
              if (e.code() == ErrorCode::kInvalidArgument) error = e.what();
            }
            REQUIRE(error.find("submitted again on rank(s) " + std::to_string(checking)) !=
                        std::string::npos,
                    "the turn of rank " << checking << "'s refused request: '" << error << "'");
          }
          auto done = rt->enqueue(again);
          done->wait(std::chrono::seconds(30));
          REQUIRE(done->output()->numel() == 4, "allgather of 2 x 2 ranks");
        }

        // Automatic names are numbered per kind: these are two tensors, both in flight.
        Request a = base(ctx.rank);
        a.name = "allreduce.noname.0";
        Request g = gather;
        g.name = "allgather.noname.0";
        auto ha = rt->enqueue(a);
        auto hg = rt->enqueue(g);
        ha->wait(std::chrono::seconds(30));
        hg->wait(std::chrono::seconds(30));
        REQUIRE(hg->output()->numel() == 4, "allgather of 2 x 2 ranks");
      });
}

// A group is taken whole or not at all: a name twice in it, or a member named as a request
// in flight, refuses the group, and the members' names are free again afterwards. A group
// refused for a request in flight takes this rank's turn of each member's name (as one
// refused request does): a peer that accepted the same group fails instead of waiting.
TEST(RuntimeMismatch, ARefusedGroupLeavesNoMemberInFlight) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        auto member = [](const std::string& name) {
          Request r;
          r.name = name;
          r.input = r.output = filledFloats(3, 1.0f);
          return r;
        };
        auto refused = [&](std::vector<Request> group, const std::string& expected) {
          try {
            rt->enqueueGroup(std::move(group));
          } catch (const Error& e) {
            return e.code() == ErrorCode::kInvalidArgument &&
                   std::string(e.what()).find(expected) != std::string::npos;
          }
          return false;
        };
        REQUIRE(refused({member("g.a"), member("g.b"), member("g.a")},
                        "a request named 'g.a' is already in flight on rank " +
                            std::to_string(ctx.rank)),
                "a group naming g.a twice was accepted");
        // Rank 0's held request stays in flight until rank 1 submits its own after the barrier.
        Request barrier;
        barrier.kind = RequestKind::kBarrier;
        barrier.name = "held";
        std::shared_ptr<Handle> held;
        if (ctx.rank == 0) {
          held = rt->enqueue(member("g.held"));
          REQUIRE(refused({member("g.c"), member("g.d"), member("g.held")}, "'g.held'"),
                  "a group with a member in flight was accepted");
          rt->enqueue(barrier)->wait(std::chrono::seconds(30));
        } else {
          rt->enqueue(barrier)->wait(std::chrono::seconds(30));
          held = rt->enqueue(member("g.held"));
        }
        held->wait(std::chrono::seconds(30));
        // Rank 1 submits the group rank 0 refused, after its own g.held completed: accepted
        // here, it meets the notices rank 0's refusal announced for each member (their turn
        // of the names) and fails whole instead of waiting for rank 0 forever.
        if (ctx.rank == 1) {
          std::string errors;
          for (const auto& h : rt->enqueueGroup({member("g.c"), member("g.d"), member("g.held")})) {
            try {
              h->wait(std::chrono::seconds(30));
            } catch (const Error& e) {
              if (e.code() == ErrorCode::kInvalidArgument &&
                  std::string(e.what()).find("submitted again on rank(s) 0") != std::string::npos)
                errors += "x";
            }
          }
          REQUIRE(errors == "xxx", "members failed by rank 0's notices: " << errors.size());
        }
        // Every name of the refused groups is free: the same members run as one group.
        std::vector<Request> again = {member("g.a"), member("g.b"), member("g.c"), member("g.d")};
        std::vector<std::shared_ptr<Tensor>> tensors;
        for (const Request& r : again) tensors.push_back(r.input);
        for (const auto& h : rt->enqueueGroup(std::move(again))) h->wait(std::chrono::seconds(30));
        for (const auto& t : tensors)
          REQUIRE(std::static_pointer_cast<HostTensor>(t)->as<float>()[2] == 6.0f,
                  "the group's sum over 2 ranks");
      });
}

TEST(RuntimeMismatch, ASignatureChangeAfterCachingIsStillChecked) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        for (int step = 0; step < 4; ++step) {
          Request r = base(ctx.rank);
          bool diverge = step == 2 && ctx.rank == 1;
          if (diverge) r.input = r.output = filledFloats(9, 1.0f);
          auto h = rt->enqueue(r);
          if (step == 2) {
            bool failed = false;
            try {
              h->wait(std::chrono::seconds(30));
            } catch (const Error& e) {
              failed = e.code() == ErrorCode::kMismatch;
            }
            REQUIRE(failed, "step 2 must fail with a mismatch on rank " << ctx.rank);
          } else {
            h->wait(std::chrono::seconds(30));
            REQUIRE(std::static_pointer_cast<HostTensor>(r.input)->as<float>()[1] == 4.0f,
                    "step " << step);
          }
        }
      });
}

}  // namespace
}  // namespace ronde::testing
