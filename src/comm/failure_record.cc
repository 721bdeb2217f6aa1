#include "comm/failure_record.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/logging.h"

namespace ronde {
namespace {

constexpr const char* kCountKey = "abort/count";
constexpr const char* kReasonKey = "abort/reason";

Error parse(const std::string& text) {
  const auto newline = text.find('\n');
  const std::string code_name = text.substr(0, newline);
  ErrorCode code = ErrorCode::kAborted;
  for (ErrorCode c : {ErrorCode::kMismatch, ErrorCode::kPeerLost, ErrorCode::kTimeout,
                      ErrorCode::kInvalidArgument, ErrorCode::kAborted}) {
    if (code_name == errorCodeName(c)) code = c;
  }
  return Error(code, text.substr(newline == std::string::npos ? 0 : newline + 1));
}

// Throws what the store throws, but for the wait on a counted writer: a timeout there means
// the writer died between count and reason.
std::optional<Error> read(Store& store, Duration writer_grace, Duration answer_bound) {
  Bytes value;
  if (store.tryGetWithin(kReasonKey, &value, answer_bound)) {
    return parse(std::string(value.begin(), value.end()));
  }
  if (writer_grace.count() <= 0 || store.add(kCountKey, 0) == 0) return std::nullopt;
  try {
    return parse(store.getString(kReasonKey, writer_grace));
  } catch (const Error&) {
    return std::nullopt;
  }
}

// On a failure path, after a request of `error` failed. The record's requests do not wait for
// a key, so a live server answers them at once: one that let a request time out is stopped or
// wedged. A failing rank reads the record and then publishes once for each communicator it
// aborts (and it aborts them all): each would wait out the request timeout again, and the
// reconnect after it, so the store is given up for this process.
void giveUpIfSilent(Store& store, const Error& error, const char* doing) {
  if (error.code() != ErrorCode::kTimeout) return;
  log(LogLevel::kWarning, "the rendezvous store did not answer while this rank ", doing,
      "; giving the store up: ", error.what());
  store.abandon();
}

// Bounds one failure-path request by `bound` whatever the store's own request timeout: when
// the request has no answer by then, a thread of the watch gives the store up, which ends the
// request (the TCP client shuts its connection down under it) with kPeerLost. A thread rather
// than a deadline passed down: any Store, wrappers included, can be given up, while only the
// TCP client would know what to do with a deadline. Failure paths only: it costs a thread.
class AnswerWatch {
 public:
  AnswerWatch(Store& store, Duration bound, const char* doing) {
    try {
      thread_ = std::thread([this, &store, bound, doing] {
        std::unique_lock<std::mutex> lock(mutex_);
        if (answered_.wait_for(lock, bound, [this] { return done_; })) return;
        lock.unlock();
        log(LogLevel::kWarning, "the rendezvous store did not answer within ", bound.count(),
            " ms while this rank ", doing, "; giving the store up");
        store.abandon();
      });
    } catch (const std::system_error&) {
      // Out of threads: the request is bounded by the store's own timeout only.
    }
  }

  ~AnswerWatch() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    answered_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  AnswerWatch(const AnswerWatch&) = delete;
  AnswerWatch& operator=(const AnswerWatch&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable answered_;
  bool done_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace

void publishFirstFailure(Store& store, ErrorCode code, const std::string& message,
                         Duration answer_bound) {
  AnswerWatch watch(store, answer_bound, "published its failure");
  try {
    if (store.add(kCountKey, 1) == 1) {
      store.setString(kReasonKey, std::string(errorCodeName(code)) + "\n" + message);
    }
  } catch (const Error& e) {
    // Peers still see closed links and time out; only the first cause goes unnamed.
    giveUpIfSilent(store, e, "published its failure");
  }
}

std::optional<Error> publishedFirstFailure(Store& store, Duration writer_grace,
                                           Duration answer_bound) {
  try {
    return read(store, writer_grace, answer_bound);
  } catch (const Error&) {
    return std::nullopt;  // gone with its rank, or only slow: the next read may tell
  }
}

Error failureToReport(Store& store, const Error& own, Duration writer_grace,
                      Duration answer_bound) {
  if (own.code() != ErrorCode::kPeerLost && own.code() != ErrorCode::kAborted) return own;
  AnswerWatch watch(store, writer_grace + answer_bound, "read the job's first failure");
  try {
    // The watch bounds the whole read, the wait for a counted writer included.
    if (std::optional<Error> first = read(store, writer_grace, Duration::max())) return *first;
  } catch (const Error& e) {
    giveUpIfSilent(store, e, "read the job's first failure");
  }
  return own;
}

Duration pollAnswerBound(std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left >= kFailurePathAnswerBound) return kFailurePathAnswerBound;
  return std::max(std::chrono::duration_cast<Duration>(left), Duration(0));
}

}  // namespace ronde
