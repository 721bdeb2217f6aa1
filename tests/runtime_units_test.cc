// Unit tests of the runtime's pieces, in one process: the wire form, mismatch messages, the
// negotiation table (readiness, join, groups, removed sets), the response cache (slots, LRU,
// invalidation), the fusion plan and the allocator tuning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

// The allocator tests need glibc's own malloc, which answers mallopt and mallinfo2; the
// sanitizers replace it with theirs.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define RONDE_TEST_GLIBC_MALLOC 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#undef RONDE_TEST_GLIBC_MALLOC
#endif
#endif
#if defined(RONDE_TEST_GLIBC_MALLOC)
#include <malloc.h>
#endif

#include "ronde/runtime.h"
#include "ronde/shared_runtime.h"
#include "runtime/allocator_tuning.h"
#include "runtime/cycle_pacer.h"
#include "runtime/descriptor.h"
#include "runtime/fusion_planner.h"
#include "runtime/negotiation_table.h"
#include "runtime/response_cache.h"

namespace ronde::runtime {
namespace {

using Clock = std::chrono::steady_clock;

Descriptor allreduce(const std::string& name, int64_t n, DataType type = DataType::kFloat32) {
  Descriptor d;
  d.name = name;
  d.kind = static_cast<uint8_t>(RequestKind::kAllreduce);
  d.dtype = type;
  d.shape = {n};
  return d;
}

TEST(RuntimeUnits, TheSharedRuntimeRefusesUseBeforeInitAndShutdownIsIdempotent) {
  EXPECT_FALSE(shared_runtime::initialized());
  try {
    shared_runtime::get();
    ADD_FAILURE() << "get() before init() returned a runtime";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("call hvd.init() first"), std::string::npos) << e.what();
  }
  shared_runtime::shutdown();  // nothing held: nothing to do
  EXPECT_FALSE(shared_runtime::initialized());
}

TEST(RuntimeUnits, DescriptorsRoundTripOnTheWire) {
  Descriptor d = allreduce("grad/fc1.weight", 12);
  d.process_set = 3;
  d.op = ReduceOp::kAverage;
  d.prescale = 0.25;
  d.postscale = 8;
  d.splits = {1, 2, 3};
  d.device = {Device::Kind::kCuda, 1};
  d.group = "g";
  d.group_size = 4;
  WireWriter w;
  w.descriptor(d);
  w.descriptor(allreduce("", 0));
  WireReader r(w.bytes().data(), w.bytes().size());
  EXPECT_EQ(r.descriptor(), d);
  EXPECT_EQ(r.descriptor(), allreduce("", 0));
  EXPECT_TRUE(r.done());
  WireReader truncated(w.bytes().data(), 10);
  EXPECT_THROW(truncated.descriptor(), std::exception);
}

TEST(RuntimeUnits, MismatchNamesTensorFieldRanksAndValues) {
  std::vector<std::optional<Descriptor>> per_rank(4);
  per_rank[0] = allreduce("w", 6);
  per_rank[1] = allreduce("w", 6, DataType::kFloat16);
  per_rank[3] = allreduce("w", 6, DataType::kFloat16);
  EXPECT_EQ(
      findMismatch(per_rank),
      "tensor 'w': dtype mismatch between ranks: rank 0 has float32; ranks 1, 3 have float16");
  per_rank[1] = per_rank[3] = allreduce("w", 6);
  EXPECT_EQ(findMismatch(per_rank), "");
  // Allgather: the first dimension may differ, the rest may not.
  for (auto& d : per_rank) {
    if (d) d->kind = static_cast<uint8_t>(RequestKind::kAllgather);
  }
  per_rank[3]->shape = {9};
  EXPECT_EQ(findMismatch(per_rank), "");
}

TEST(RuntimeUnits, TableIsReadyWhenEveryMemberAnnouncedInAnnouncementOrder) {
  ProcessSets sets(3);
  NegotiationTable table(3);
  auto now = Clock::now();
  table.announce(1, allreduce("b", 4), now);
  table.announce(0, allreduce("a", 4), now);
  table.announce(0, allreduce("b", 4), now);
  EXPECT_TRUE(table.takeReady(sets).empty());
  table.announce(2, allreduce("a", 4), now);
  table.announce(2, allreduce("b", 4), now);
  table.announce(1, allreduce("a", 4), now);
  auto ready = table.takeReady(sets);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].key.second, "b");  // announced first
  EXPECT_EQ(ready[1].key.second, "a");
  EXPECT_TRUE(table.empty());
}

TEST(RuntimeUnits, ATensorAnnouncedAsTwoKindsFailsOnceEveryMemberAnnouncedIt) {
  ProcessSets sets(3);
  NegotiationTable table(3);
  auto now = Clock::now();
  Descriptor gather = allreduce("allgather.w", 4);
  gather.kind = static_cast<uint8_t>(RequestKind::kAllgather);
  table.announce(0, allreduce("allreduce.w", 4), now);
  table.announce(1, gather, now);
  EXPECT_TRUE(table.announced(allreduce("allreduce.w", 4)));
  EXPECT_TRUE(table.announced(allreduce("w", 4)));  // the same tensor, by the C++ API's name
  EXPECT_FALSE(table.announced(allreduce("allreduce.noname.0", 4)));
  EXPECT_TRUE(table.takeReady(sets).empty());  // rank 2 may still announce either
  table.announce(2, allreduce("allreduce.w", 4), now);
  auto ready = table.takeReady(sets);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].key.second, "allreduce.w");
  EXPECT_EQ(ready[1].key.second, "allgather.w");
  const std::string expected =
      "tensor 'w': kind mismatch between ranks: ranks 0, 2 have allreduce; rank 1 has allgather "
      "(announced as rank 0 'allreduce.w', rank 1 'allgather.w', rank 2 'allreduce.w')";
  for (const Response& r : ready) {
    EXPECT_EQ(r.error, expected);
    EXPECT_EQ(r.error_code, ErrorCode::kMismatch);
  }
  EXPECT_TRUE(table.empty());
  EXPECT_FALSE(table.announced(allreduce("allreduce.w", 4)));
}

TEST(RuntimeUnits, JoinedRanksCountForAllreduceOnlyAndJoinReportsTheLast) {
  ProcessSets sets(3);
  NegotiationTable table(3);
  auto now = Clock::now();
  Descriptor join;
  join.name = "join";
  join.kind = static_cast<uint8_t>(RequestKind::kJoin);
  table.announce(2, join, now);
  table.announce(0, allreduce("x", 2), now);
  table.announce(1, allreduce("x", 2), now);
  Descriptor gather = allreduce("g", 2);
  gather.kind = static_cast<uint8_t>(RequestKind::kAllgather);
  table.announce(0, gather, now);
  table.announce(1, gather, now);
  auto ready = table.takeReady(sets);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].key.second, "x");
  EXPECT_TRUE(ready[0].error.empty());
  EXPECT_FALSE(ready[0].agreement->per_rank[2].has_value());  // rank 2 contributes zeros
  EXPECT_EQ(ready[1].key.second, "g");
  EXPECT_NE(ready[1].error.find("joined"), std::string::npos);
  table.announce(0, join, now);
  table.announce(1, join, now);
  ready = table.takeReady(sets);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].result, std::vector<int64_t>{1});
  EXPECT_FALSE(table.joined(2));
}

TEST(RuntimeUnits, GroupsAreReleasedTogetherAndSetsOnlyWaitForMembers) {
  ProcessSets sets(3);
  int odd = sets.add({1});
  NegotiationTable table(3);
  auto now = Clock::now();
  for (const char* name : {"g0", "g1"}) {
    Descriptor d = allreduce(name, 2);
    d.group = "g0";
    d.group_size = 2;
    for (int r = 0; r < 3; ++r) {
      if (std::string(name) == "g0" || r < 2) table.announce(r, d, now);
    }
  }
  Descriptor mine = allreduce("solo", 1);
  mine.process_set = odd;
  table.announce(1, mine, now);
  auto ready = table.takeReady(sets);
  ASSERT_EQ(ready.size(), 1u);  // g0 waits for g1
  EXPECT_EQ(ready[0].key.second, "solo");
  Descriptor g1 = allreduce("g1", 2);
  g1.group = "g0";
  g1.group_size = 2;
  table.announce(2, g1, now);
  ready = table.takeReady(sets);
  ASSERT_EQ(ready.size(), 2u);
  auto waiting = table.waiting(sets);
  EXPECT_TRUE(waiting.empty());
}

Response responseFor(const std::string& name, int64_t n, int world = 2) {
  Response r;
  r.key = {0, name};
  auto agreement = std::make_shared<Agreement>();
  for (int i = 0; i < world; ++i) agreement->per_rank.push_back(allreduce(name, n));
  r.agreement = agreement;
  for (int i = 0; i < world; ++i) r.members.push_back(i);
  return r;
}

TEST(RuntimeUnits, CacheSlotsEvictLeastRecentlyUsedAndReportInvalidations) {
  ResponseCache cache(2);
  EXPECT_TRUE(cache.put(responseFor("a", 1)).empty());
  EXPECT_TRUE(cache.put(responseFor("b", 1)).empty());
  int a = cache.find({0, "a"});
  cache.touch(a);
  auto evicted = cache.put(responseFor("c", 1));  // evicts b, the least recently used
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].second, "b");
  EXPECT_EQ(cache.find({0, "b"}), -1);
  EXPECT_TRUE(cache.matches(cache.find({0, "c"}), 1, allreduce("c", 1)));
  EXPECT_FALSE(cache.matches(cache.find({0, "c"}), 1, allreduce("c", 2)));
  auto replaced = cache.put(responseFor("c", 2));  // a new signature takes the same slot
  ASSERT_EQ(replaced.size(), 1u);
  EXPECT_TRUE(cache.matches(cache.find({0, "c"}), 0, allreduce("c", 2)));
  EXPECT_EQ(cache.highWater(), 2);
  Response failed = responseFor("d", 1);
  failed.error = "mismatch";
  EXPECT_FALSE(ResponseCache::cacheable(failed));
}

TEST(RuntimeUnits, FusionPacksByDtypeUpToTheThreshold) {
  std::vector<Response> responses;
  responses.push_back(responseFor("a", 100));  // 400 B
  responses.push_back(responseFor("b", 100));  // 400 B
  Response half = responseFor("h", 100);
  std::const_pointer_cast<Agreement>(half.agreement)->per_rank[0]->dtype = DataType::kFloat16;
  std::const_pointer_cast<Agreement>(half.agreement)->per_rank[1]->dtype = DataType::kFloat16;
  responses.push_back(half);
  responses.push_back(responseFor("c", 100));  // exceeds 1000 B with a, b
  auto plan = planExecution(responses, 1000);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].responses, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(plan[1].responses, (std::vector<size_t>{2}));
  EXPECT_EQ(plan[2].responses, (std::vector<size_t>{3}));
  EXPECT_EQ(planExecution(responses, 0).size(), 4u);        // threshold 0: no fusion
  EXPECT_EQ(planExecution(responses, 1 << 20).size(), 2u);  // one buffer per dtype
}

TEST(RuntimeUnits, TensorsAboveTheLargestFusedSizeRunAloneAndTheRestStillFuse) {
  std::vector<Response> responses;
  responses.push_back(responseFor("small.a", 100));  // 400 B
  responses.push_back(responseFor("large", 1000));   // 4000 B
  responses.push_back(responseFor("small.b", 100));
  responses.push_back(responseFor("edge", 256));  // 1024 B: at the limit, still fused
  auto plan = planExecution(responses, 1 << 20, 1024);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].responses, (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(plan[1].responses, (std::vector<size_t>{1}));
  EXPECT_EQ(planExecution(responses, 1 << 20, 0).size(), 1u);  // 0: no limit, as Horovod
  EXPECT_EQ(planExecution(responses, 1 << 20, 399).size(), 4u);  // nothing small enough
}

// A response of `kind` (every member announcing the same tensor of n float32).
Response responseOfKind(const std::string& name, int64_t n, RequestKind kind) {
  Response r = responseFor(name, n);
  for (auto& d : std::const_pointer_cast<Agreement>(r.agreement)->per_rank)
    d->kind = static_cast<uint8_t>(kind);
  return r;
}

TEST(RuntimeUnits, ReducescattersFuseByTheirWholeInputAndAlltoallsRunAlone) {
  std::vector<Response> responses;
  responses.push_back(responseOfKind("rs.a", 100, RequestKind::kReducescatter));  // 400 B
  responses.push_back(responseOfKind("a2a.a", 10, RequestKind::kAlltoall));
  responses.push_back(responseOfKind("rs.b", 100, RequestKind::kReducescatter));
  responses.push_back(responseOfKind("a2a.b", 10, RequestKind::kAlltoall));
  responses.push_back(responseOfKind("rs.c", 100, RequestKind::kReducescatter));  // over 1000 B
  responses.push_back(responseOfKind("ar", 10, RequestKind::kAllreduce));  // another kind
  auto plan = planExecution(responses, 1000);
  ASSERT_EQ(plan.size(), 5u);
  EXPECT_EQ(plan[0].responses, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(plan[1].responses, (std::vector<size_t>{1}));
  EXPECT_EQ(plan[2].responses, (std::vector<size_t>{3}));
  EXPECT_EQ(plan[3].responses, (std::vector<size_t>{4}));
  EXPECT_EQ(plan[4].responses, (std::vector<size_t>{5}));
  EXPECT_EQ(planExecution(responses, 1 << 20).size(), 4u);
  EXPECT_EQ(planExecution(responses, 1 << 20, 399).size(), 6u);  // above the largest fused
}

#if defined(RONDE_TEST_GLIBC_MALLOC)
TEST(RuntimeUnits, AllocatorTuningLeavesAUsersMallocSettingsAlone) {
  auto only = [](const char* set, const char* value) {
    return [set, value](const char* name) -> const char* {
      return std::strcmp(name, set) == 0 ? value : nullptr;
    };
  };
  const std::string left = "left as it is";
  EXPECT_EQ(tuneAllocator(only("MALLOC_TRIM_THRESHOLD_", "0")).rfind(left, 0), 0u);
  EXPECT_EQ(tuneAllocator(only("MALLOC_MMAP_THRESHOLD_", "4096")).rfind(left, 0), 0u);
  EXPECT_EQ(tuneAllocator(only("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")).rfind(left, 0),
            0u);
  EXPECT_NE(
      tuneAllocator(only("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=1")).rfind(left, 0), 0u);
}

// What glibc does with an 8 MiB block, as the exit code: 1 when it gets a mapping of its own
// (unmapped again on free), 2 when freeing it trims the heap; 0 when it stays mapped for the
// next allocation. Each case starts from glibc's initial thresholds (128 KiB both), whatever
// this process's earlier allocations raised them to.
enum class Thresholds { kGlibcDefaults, kMmapRaisedOnly, kTuned };

[[noreturn]] void exitWithWhatMallocDidWithALargeBlock(Thresholds thresholds) {
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  if (thresholds == Thresholds::kMmapRaisedOnly)
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes));
  if (thresholds == Thresholds::kTuned)
    tuneAllocator([](const char*) -> const char* { return nullptr; });
  const size_t bytes = 8u << 20;
  const struct mallinfo2 before = mallinfo2();
  void* volatile block = std::malloc(bytes);  // volatile: the pair is not optimised away
  std::memset(block, 1, bytes);
  const struct mallinfo2 during = mallinfo2();
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  std::_Exit((during.hblks > before.hblks ? 1 : 0) | (after.arena < during.arena ? 2 : 0));
}

// Each case in a fresh process (the threadsafe style runs the binary again): the thresholds
// are the process's own.
TEST(RuntimeUnitsDeathTest, AllocatorTuningKeepsALargeFreedBlockMapped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exitWithWhatMallocDidWithALargeBlock(Thresholds::kGlibcDefaults),
              testing::ExitedWithCode(1), "");
  EXPECT_EXIT(exitWithWhatMallocDidWithALargeBlock(Thresholds::kMmapRaisedOnly),
              testing::ExitedWithCode(2), "");
  EXPECT_EXIT(exitWithWhatMallocDidWithALargeBlock(Thresholds::kTuned), testing::ExitedWithCode(0),
              "");
}
#endif

std::unique_ptr<Communicator> soloCommunicator() {
  CommOptions options;
  options.rank = 0;
  options.size = 1;
  return Communicator::create(options);
}

TEST(RuntimeUnits, BadKnobsAreConfigErrorsAtInit) {
  Settings s;
  s.fusion_threshold_bytes = -1;
  try {
    Runtime::init(s, soloCommunicator());
    FAIL() << "a negative fusion threshold must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
    EXPECT_NE(std::string(e.what()).find("RONDE_FUSION_THRESHOLD"), std::string::npos) << e.what();
  }
  s = Settings();
  s.cycle_time_ms = 0;
  EXPECT_THROW(Runtime::init(s, soloCommunicator()), Error);
  s = Settings();
  s.timeline_path = "/nonexistent-dir/timeline.json";
  EXPECT_THROW(Runtime::init(s, soloCommunicator()), Error);
}

TEST(RuntimeUnits, InitFromTheEnvironmentRunsASoloJob) {
  ::setenv("RONDE_RANK", "0", 1);
  ::setenv("RONDE_SIZE", "1", 1);
  ::setenv("RONDE_CYCLE_TIME", "0.5", 1);
  auto rt = Runtime::init();
  EXPECT_TRUE(rt->isInitialized());
  EXPECT_EQ(rt->size(), 1);
  auto t = std::make_shared<HostTensor>(DataType::kFloat32, std::vector<int64_t>{3});
  t->as<float>()[0] = 2;
  Request r;
  r.name = "solo";
  r.input = r.output = t;
  r.op = ReduceOp::kAverage;
  r.scaling.postscale = 3;
  rt->enqueue(r)->wait(std::chrono::seconds(10));
  EXPECT_EQ(t->as<float>()[0], 6.0f);
  EXPECT_THROW(rt->enqueue(Request{}), Error);  // no name
  rt->shutdown();
  EXPECT_FALSE(rt->isInitialized());
  ::unsetenv("RONDE_RANK");
  ::unsetenv("RONDE_SIZE");
  ::unsetenv("RONDE_CYCLE_TIME");
}

TEST(RuntimeUnits, PacerGoesBackToPeersOnlyWhenThatCannotSpin) {
  CyclePacer pacer;
  CycleOutcome waiting;
  waiting.waiting_on_peers = true;
  // Nothing ran and every rank holds work the others lack: going straight back would spin
  // the ranks against each other, so this rank waits for its clock or its own work.
  CyclePacer::Next next = pacer.afterCycle(waiting, 2.0);
  EXPECT_FALSE(next.at_once);
  EXPECT_EQ(next.sleep_ms, 2.0);
  // Some rank is free: it only comes when its work arrives, so waiting for it in
  // negotiation costs nothing and meets it the moment it does.
  waiting.some_rank_free = true;
  EXPECT_TRUE(pacer.afterCycle(waiting, 2.0).at_once);
  waiting.some_rank_free = false;
  waiting.progressed = true;
  EXPECT_TRUE(pacer.afterCycle(waiting, 2.0).at_once);
  // Nothing of its own waiting: the clock (or arriving work) starts the next cycle.
  CycleOutcome done;
  done.progressed = true;
  done.some_rank_free = true;
  next = pacer.afterCycle(done, 2.0);
  EXPECT_FALSE(next.at_once);
  EXPECT_EQ(next.sleep_ms, 2.0);
}

TEST(RuntimeUnits, PacerStretchesIdleCyclesToTenMillisecondsAndResetsOnWork) {
  CyclePacer pacer;
  CycleOutcome idle;
  idle.everyone_idle = true;
  idle.some_rank_free = true;
  std::vector<double> sleeps;
  for (int i = 0; i < 40; ++i) sleeps.push_back(pacer.afterCycle(idle, 0.5).sleep_ms);
  EXPECT_EQ(sleeps[0], 0.5);
  EXPECT_EQ(sleeps[19], 0.5);  // patience: 20 idle cycles at the cycle time
  EXPECT_EQ(sleeps[20], 1.0);  // then doubling
  EXPECT_EQ(sleeps[21], 2.0);
  EXPECT_EQ(sleeps[39], 10.0);  // capped
  EXPECT_TRUE(std::is_sorted(sleeps.begin(), sleeps.end()));
  EXPECT_EQ(pacer.afterCycle(CycleOutcome{}, 0.5).sleep_ms, 0.5);
  EXPECT_EQ(pacer.idleCycles(), 0);
  // A cycle time above the cap is never shortened.
  for (int i = 0; i < 40; ++i) EXPECT_EQ(pacer.afterCycle(idle, 25.0).sleep_ms, 25.0);
}

}  // namespace
}  // namespace ronde::runtime
