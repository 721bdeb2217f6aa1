// What the liveness tests check of a job with a stopped (SIGSTOP) rank: the others' handles
// fail with kPeerLost naming it and its host, long before the collective timeout, and the
// stopped rank ends killed while every other rank passes.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "ronde/runtime.h"
#include "support/multiprocess.h"

namespace ronde::testing {

std::string thisHost();

// True once /proc says the process is stopped (state T).
bool isStopped(pid_t pid);

// An allreduce of `t` in place.
Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t);

// In a child: the handle must fail with kPeerLost naming `silent` and `host` within 8 s (a
// liveness timeout of 2-2.5 s and the rest slack; the collective timeout is 60 s: only
// liveness can be that quick). Throws (REQUIRE) otherwise; returns the error's text.
std::string requirePeerLost(Handle& handle, int silent, const std::string& host);

// In the parent: `killed` ended by SIGKILL (the stopped one, killed by a peer), every other
// rank exited 0.
void expectKilledAndOthersPassed(const std::vector<ChildOutcome>& outcomes, int killed);

}  // namespace ronde::testing
