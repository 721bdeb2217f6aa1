// The first failure of a job, kept in the job's store: the rank that fails first publishes
// what went wrong, and every rank that only sees the echo (a closed link, an aborted wait)
// reports that first failure instead, so all ranks name the same cause.
#pragma once

#include <optional>

#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {

// Publishes `code` and `message` unless another rank published first. Never throws: the
// store may have gone with the rank that served it.
void publishFirstFailure(Store& store, ErrorCode code, const std::string& message);

// The published first failure, if any. A writer counts itself in before it writes the
// reason, so one that is counted but has not written yet is waited for up to `writer_grace`.
std::optional<Error> publishedFirstFailure(Store& store, Duration writer_grace);

}  // namespace ronde
