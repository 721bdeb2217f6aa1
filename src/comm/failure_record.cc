#include "comm/failure_record.h"

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
std::optional<Error> read(Store& store, Duration writer_grace) {
  Bytes value;
  if (store.tryGet(kReasonKey, &value)) return parse(std::string(value.begin(), value.end()));
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

}  // namespace

void publishFirstFailure(Store& store, ErrorCode code, const std::string& message) {
  try {
    if (store.add(kCountKey, 1) == 1) {
      store.setString(kReasonKey, std::string(errorCodeName(code)) + "\n" + message);
    }
  } catch (const Error& e) {
    // Peers still see closed links and time out; only the first cause goes unnamed.
    giveUpIfSilent(store, e, "published its failure");
  }
}

std::optional<Error> publishedFirstFailure(Store& store, Duration writer_grace) {
  try {
    return read(store, writer_grace);
  } catch (const Error&) {
    return std::nullopt;  // gone with its rank, or only slow: the next read may tell
  }
}

Error failureToReport(Store& store, const Error& own, Duration writer_grace) {
  if (own.code() != ErrorCode::kPeerLost && own.code() != ErrorCode::kAborted) return own;
  try {
    if (std::optional<Error> first = read(store, writer_grace)) return *first;
  } catch (const Error& e) {
    giveUpIfSilent(store, e, "read the job's first failure");
  }
  return own;
}

}  // namespace ronde
