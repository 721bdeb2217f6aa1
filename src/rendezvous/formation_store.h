// The store an elastic worker forms generation G through: once the driver has published a
// newer generation (it does so when a member of G died or the hosts changed), every wait of
// G's formation fails at once with Error(kPeerLost) naming both generations, instead of
// waiting out the start timeout for a member that will never come. After the communicator
// is formed, disarm() makes it a plain pass-through: a generation published during training
// is taken up at the next commit, not by failing the running world's store calls.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "ronde/store.h"

namespace ronde {

class FormationStore : public Store {
 public:
  // `inner` holds generation G's keys (its prefix); `root` is the job's store, where the
  // driver publishes generations.
  FormationStore(std::shared_ptr<Store> inner, std::shared_ptr<Store> root, int64_t generation,
                 Duration check_interval = Duration(200));

  void set(const std::string& key, const Bytes& value) override;
  // Waits in slices of the check interval, looking for a newer generation between them.
  Bytes get(const std::string& key, Duration timeout) override;
  bool tryGet(const std::string& key, Bytes* value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void erase(const std::string& key) override;

  void disarm() { armed_.store(false); }

 private:
  // Throws Error(kPeerLost) once a generation newer than G is published; looks at most once
  // per check interval, so polling loops do not double the store's traffic.
  void throwIfSuperseded();
  [[noreturn]] void throwSuperseded(int64_t newer) const;

  std::shared_ptr<Store> inner_;
  std::shared_ptr<Store> root_;
  const int64_t generation_;
  const Duration check_interval_;
  std::atomic<bool> armed_{true};
  std::atomic<int64_t> last_check_ns_{0};  // steady clock, since its epoch
  std::atomic<int64_t> superseded_by_{0};  // once seen, every later call fails without asking
};

}  // namespace ronde
