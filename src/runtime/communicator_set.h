// The runtime's communicators, all built from the world communicator it was given:
//   - control: a communicator of its own over every rank (store prefix control/) for the
//     per-cycle negotiation (cache bits, announcements, knobs), so that those small messages
//     never queue behind a collective's data on the same links or shm slots;
//   - world data: the given communicator, for process set 0 (and join, which spans the world);
//   - one data communicator per process set this rank belongs to (store prefix pset/<id>/),
//     over the members only: a rank outside a set does no work and moves no bytes for it.
// They share the world's failure record, so whichever fails first is what every rank reports;
// abortAll() ends them together.
//
// Threads: the background thread builds, uses and drops them; abortAll() may be called from
// any thread (the liveness monitor, a user's abort) while it does.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ronde/communicator.h"

namespace ronde::runtime {

class CommunicatorSet {
 public:
  // Builds the control communicator beside `world` (collective over the world).
  explicit CommunicatorSet(std::unique_ptr<Communicator> world);
  ~CommunicatorSet();
  CommunicatorSet(const CommunicatorSet&) = delete;
  CommunicatorSet& operator=(const CommunicatorSet&) = delete;

  Communicator& world() { return *world_; }
  Communicator& control() { return *control_; }
  // The data communicator of process set `id` (world for 0); null when this rank is not a
  // member (or the set is unknown).
  Communicator* data(int id);

  // Builds the data communicator of a new set: collective over `ranks` (sorted world ranks)
  // alone. A rank outside the set only records that it has none.
  void addSet(int id, const std::vector<int>& ranks);
  void removeSet(int id);
  // Applies the communicator knobs to every data communicator of this rank, and to sets
  // built later. The control communicator keeps its own: it moves only small messages.
  void setDataTuning(const CommTuning& tuning);

  // Aborts every communicator with `reason` (the first abort of each keeps its own reason).
  void abortAll(ErrorCode code, const std::string& reason);
  // Throws the error of the first communicator found aborted (e.g. by a user's
  // communicator().abort()), so that the background thread ends all of them.
  void throwIfAnyAborted();
  // Destroys every communicator (the world last); afterwards only hasWorld() may be asked.
  void reset();
  bool hasWorld() const { return world_ != nullptr; }

 private:
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<Communicator> control_;
  std::mutex mutex_;                                   // guards sets_ against abortAll()
  std::map<int, std::unique_ptr<Communicator>> sets_;  // guarded by mutex_; this rank's sets
  std::optional<CommTuning> data_tuning_;  // set by setDataTuning; guarded by mutex_
};

}  // namespace ronde::runtime
