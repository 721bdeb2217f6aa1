// FailureWatchingStore: a communicator forming inside a running job stops waiting for a member
// once the job's first failure is published, and reports it, instead of waiting out the start
// timeout; it passes everything through while no failure is published.
#include "comm/failure_watching_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/failure_record.h"

namespace ronde {
namespace {

using Clock = std::chrono::steady_clock;

TEST(FailureWatchingStore, PassesKeysThroughWhileNoFailureIsPublished) {
  auto inner = makeMemoryStore();
  auto failures = makeMemoryStore();
  FailureWatchingStore store(inner, failures, Duration(10));
  store.setString("a", "1");
  EXPECT_EQ(inner->getString("a", Duration(10)), "1");
  EXPECT_EQ(store.add("n", 2), 2);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    inner->setString("b", "2");
  });
  EXPECT_EQ(store.getString("b", Duration(5000)), "2");  // across several slices
  late.join();
  try {
    store.get("never", Duration(60));
    FAIL() << "a missing key was found";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();  // the caller's timeout, as it was
  }
}

TEST(FailureWatchingStore, AWaitEndsAtOnceWhenAFailureIsPublished) {
  auto inner = makeMemoryStore();
  auto failures = makeMemoryStore();
  FailureWatchingStore store(inner, failures, Duration(20));
  std::thread failing([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    publishFirstFailure(*failures, ErrorCode::kIo, "rank 3 (host b): its GPU fell off the bus");
  });
  const auto began = Clock::now();
  try {
    store.get("host/3", Duration(60000));
    FAIL() << "the wait outlived the published failure";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerLost) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 3 (host b): its GPU fell off the bus"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(5));
  failing.join();
  // Every later call is refused the same way, but erasing (cleaning up) still works.
  EXPECT_THROW(store.setString("x", "1"), Error);
  EXPECT_NO_THROW(store.erase("x"));
}

}  // namespace
}  // namespace ronde
