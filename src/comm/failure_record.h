// The first failure of a job, kept in the job's store: the rank that fails first publishes
// what went wrong, and every rank that only sees the echo (a closed link, an aborted wait)
// reports that first failure instead, so all ranks name the same cause.
#pragma once

#include <chrono>
#include <optional>

#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {

// How long a failing rank waits for the store to answer one of the record's requests. They
// never wait for a key, so a live server answers at once, even loaded; the store's own request
// timeout is the start timeout (60 s by default), which a failing rank should not spend.
constexpr Duration kFailurePathAnswerBound{10000};

// Publishes `code` and `message` unless another rank published first. Never throws: the
// store may have gone with the rank that served it. A store that does not answer within
// `answer_bound` (or lets the request time out sooner) is given up (Store::abandon), which
// ends the request, and this process's later publishes and reads fail at once instead of
// each waiting again.
void publishFirstFailure(Store& store, ErrorCode code, const std::string& message,
                         Duration answer_bound = kFailurePathAnswerBound);

// The published first failure, if any. A writer counts itself in before it writes the
// reason, so one that is counted but has not written yet is waited for up to `writer_grace`.
// Never throws, and keeps a store that does not answer: callers poll it while they wait. A
// caller whose wait has a deadline passes `answer_bound` (pollAnswerBound): the first read's
// answer is awaited at most that long (Store::tryGetWithin), so a stopped store costs the poll
// no more; by default the store's own request timeout bounds it.
std::optional<Error> publishedFirstFailure(Store& store, Duration writer_grace,
                                           Duration answer_bound = Duration::max());

// The answer bound for a poll made by a wait that ends at `deadline`: what is left of the
// wait, at most kFailurePathAnswerBound, so that the poll never carries the wait past its
// deadline.
Duration pollAnswerBound(std::chrono::steady_clock::time_point deadline);

// What a communicator failing with `own` reports before it aborts: where `own` may be the echo
// of another rank's failure (a lost peer, an abort), the job's first published failure, if any
// (waiting for a counted writer up to `writer_grace`); else `own`. Never throws; a store that
// does not answer within `answer_bound` (beyond the writer's grace) is given up, as by
// publishFirstFailure.
Error failureToReport(Store& store, const Error& own, Duration writer_grace,
                      Duration answer_bound = kFailurePathAnswerBound);

}  // namespace ronde
