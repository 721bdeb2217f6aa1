// The one runtime of a process whose frontends have a module-level API, as Horovod's has:
// hvd.init() in Python starts it, and every frontend loaded into the process submits to it
// (ronde._core for torch, MXNet and the numpy bridge; ronde.tensorflow's compiled kernels).
// It lives in libronde, which each of those libraries links, so a process has one however
// many frontends it loads. Programs that own their runtime (the C++ API, LibTorch's frontend)
// call Runtime::init() themselves and never touch this one.
//
// Threads: every function may be called from any thread. get() hands out a reference that
// keeps the runtime alive while a call uses it, even across a concurrent shutdown().
#pragma once

#include <memory>

#include "ronde/runtime.h"

namespace ronde::shared_runtime {

// Starts the runtime from the environment (Runtime::init()) unless one is already held, even
// a stopped one: every rank shuts down before the next init (see ronde.torch.init).
void init();
// Shuts the held runtime down and lets it go; the next init() starts a fresh one.
void shutdown();
// The held runtime; Error(kInvalidArgument) "ronde has not been initialized" when none is.
std::shared_ptr<Runtime> get();
// A runtime is held and has not stopped.
bool initialized();

}  // namespace ronde::shared_runtime
