// The elastic driver: `ronde run --host-discovery-script S ...` (horovodrun's elastic mode).
//
// Policy, in one place:
//  - discovery runs every second; hosts it stops listing lose their workers (stopped), new
//    hosts and free slots get new workers, up to --max-np;
//  - every change of the world is a new generation: the driver writes each worker's place
//    (rank, sizes, host) into the store, then publishes the generation number. Running
//    workers see it at their next commit or check_host_updates (HostsUpdatedInterrupt);
//    workers that lost a peer ask for a new generation and wait for it;
//  - surviving workers keep their processes; they take the lowest ranks, in their old order,
//    so rank 0 of a new world always holds committed state when anyone does;
//  - a worker that exits non-zero or by a signal blacklists its host: no new worker starts
//    there for a random pause in --blacklist-cooldown-range, or for the rest of the job
//    without it; the host's surviving workers stay;
//  - more resets than --reset-limit, or fewer than --min-np slots for --elastic-timeout
//    seconds, stop the job with exit code 1 and a message naming the limit;
//  - a worker that exits 0 means training is over: no new generation is formed, and the job
//    ends with the others' exits.
#pragma once

#include "launcher/run_options.h"

namespace ronde::launcher {

// Runs an elastic job to its end; returns the launcher's exit code.
int runElasticJob(const RunOptions& options);

}  // namespace ronde::launcher
