// The store an elastic worker forms generation G through: once the driver has published a
// newer generation (it does so when a member of G died or the hosts changed), every wait of
// G's formation fails at once with Error(kPeerLost) naming both generations, instead of
// waiting out the start timeout for a member that will never come. After the communicator
// is formed, disarm() makes it a plain pass-through: a generation published during training
// is taken up at the next commit, not by failing the running world's store calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "rendezvous/watched_store.h"

namespace ronde {

class FormationStore final : public WatchedStore {
 public:
  // `inner` holds generation G's keys (its prefix); `root` is the job's store, where the
  // driver publishes generations.
  FormationStore(std::shared_ptr<Store> inner, std::shared_ptr<Store> root, int64_t generation,
                 Duration check_interval = Duration(200));

  void disarm() { armed_.store(false); }

 protected:
  void check() override;
  bool watching() const override { return armed_.load(); }

 private:
  std::shared_ptr<Store> root_;
  const int64_t generation_;
  std::atomic<bool> armed_{true};
};

}  // namespace ronde
