#include "ronde/shared_runtime.h"

#include <mutex>
#include <utility>

namespace ronde::shared_runtime {
namespace {

struct Slot {
  std::mutex mutex;
  std::shared_ptr<Runtime> runtime;  // guarded by mutex
};

// Never destroyed: a frontend may still hold or drop its reference during the process's exit.
Slot& slot() {
  static Slot* instance = new Slot();
  return *instance;
}

}  // namespace

void init() {
  Slot& s = slot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.runtime) return;
  s.runtime = std::shared_ptr<Runtime>(Runtime::init());
}

void shutdown() {
  std::shared_ptr<Runtime> runtime;
  {
    Slot& s = slot();
    std::lock_guard<std::mutex> lock(s.mutex);
    runtime.swap(s.runtime);
  }
  if (runtime) runtime->shutdown();  // outside the lock: it waits for the peers
}

std::shared_ptr<Runtime> get() {
  Slot& s = slot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.runtime) {
    throw Error(ErrorCode::kInvalidArgument,
                "ronde has not been initialized; call hvd.init() first");
  }
  return s.runtime;
}

bool initialized() {
  Slot& s = slot();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.runtime != nullptr && s.runtime->isInitialized();
}

}  // namespace ronde::shared_runtime
