#include "comm/failure_record.h"

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

}  // namespace

void publishFirstFailure(Store& store, ErrorCode code, const std::string& message) {
  try {
    if (store.add(kCountKey, 1) == 1) {
      store.setString(kReasonKey, std::string(errorCodeName(code)) + "\n" + message);
    }
  } catch (const Error&) {
    // Peers still see closed links and time out; only the first cause goes unnamed.
  }
}

std::optional<Error> publishedFirstFailure(Store& store, Duration writer_grace) {
  try {
    Bytes value;
    if (store.tryGet(kReasonKey, &value)) return parse(std::string(value.begin(), value.end()));
    if (writer_grace.count() <= 0 || store.add(kCountKey, 0) == 0) return std::nullopt;
    return parse(store.getString(kReasonKey, writer_grace));
  } catch (const Error&) {
    return std::nullopt;  // gone with its rank, or the writer died between count and reason
  }
}

}  // namespace ronde
