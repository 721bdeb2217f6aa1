// How NCCL's unique id travels (src/rendezvous/unique_id_exchange.h): the root's bytes reach
// every rank through the store, a missing root is a timeout naming it, and an id of the wrong
// size (ranks built against different libraries) is a mismatch.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "rendezvous/unique_id_exchange.h"
#include "ronde/errors.h"

namespace ronde {
namespace {

TEST(UniqueIdExchange, EveryRankGetsTheRootsBytesAndOnlyTheRootMakesThem) {
  auto store = makeMemoryStore();
  const int size = 4;
  std::atomic<int> made{0};
  std::vector<Bytes> got(size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      UniqueIdExchange exchange{"nccl/unique_id", r, 2, "rank 2 (host b)", 3};
      got[r] = exchangeUniqueId(
          *store, exchange,
          [&] {
            ++made;
            return Bytes{7, 8, 9};
          },
          Deadline::after(Duration(10000)));
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(made.load(), 1);
  for (int r = 0; r < size; ++r) EXPECT_EQ(got[r], (Bytes{7, 8, 9})) << "rank " << r;
}

TEST(UniqueIdExchange, AMissingRootIsATimeoutNamingItAndTheKey) {
  auto store = makeMemoryStore();
  UniqueIdExchange exchange{"nccl/unique_id", 1, 0, "rank 0 (host a)", 128};
  try {
    exchangeUniqueId(
        *store, exchange, [] { return Bytes{}; }, Deadline::after(Duration(100)));
    FAIL() << "no root, yet an id";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    const std::string text = e.what();
    EXPECT_NE(text.find("rank 0 (host a)"), std::string::npos) << text;
    EXPECT_NE(text.find("nccl/unique_id"), std::string::npos) << text;
    EXPECT_NE(text.find("rank 1 "), std::string::npos) << text;
  }
}

TEST(UniqueIdExchange, AnIdOfTheWrongSizeIsAMismatch) {
  auto store = makeMemoryStore();
  store->set("nccl/unique_id", Bytes(64, 1));
  UniqueIdExchange exchange{"nccl/unique_id", 1, 0, "rank 0 (host a)", 128};
  try {
    exchangeUniqueId(
        *store, exchange, [] { return Bytes{}; }, Deadline::after(Duration(1000)));
    FAIL() << "a 64-byte id was taken for 128";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_NE(std::string(e.what()).find("64 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ronde
