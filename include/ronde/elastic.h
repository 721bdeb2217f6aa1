// Elastic training from C++: what a worker started by `ronde run --host-discovery-script`
// needs between steps. The reset loop is the same as Python's (docs/elastic.md):
//
//   ronde::ElasticWorkerView view;                       // once per process
//   for (;;) {
//     auto runtime = ronde::Runtime::init();             // waits for the driver's next world
//     int64_t joined = view.joined();
//     try {
//       sync(*runtime);                                  // broadcast state from a survivor
//       train(*runtime, [&] { return view.published() > joined; });  // check at each commit
//       break;
//     } catch (const ronde::Error& e) {                  // kPeerLost, kAborted, kTimeout
//       restoreLastCommit();
//     }
//     runtime->shutdown();
//   }
//
// The decision to leave for a new world must be the same on every rank: reduce the flag
// (max over ranks) before acting on it, as ronde.torch.elastic's check_host_updates does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ronde/store.h"

namespace ronde {

// Has the driver published a generation newer than the one this worker joined? Holds its own
// store connection (the communicator's is busy with heartbeats), made from the settings
// `ronde run` hands elastic workers.
//
// Threads: one caller at a time.
class ElasticWorkerView {
 public:
  // Reads RONDE_STORE_ADDRESS, RONDE_SECRET and RONDE_ELASTIC_WORKER_ID; Error(kConfig) when
  // this process was not started as an elastic worker.
  ElasticWorkerView();
  const std::string& workerId() const { return worker_id_; }
  // The newest generation the driver published (one store round trip).
  int64_t published();
  // The generation this worker's newest init joined (0: none yet).
  int64_t joined();

 private:
  std::string worker_id_;
  std::shared_ptr<Store> store_;
};

}  // namespace ronde
