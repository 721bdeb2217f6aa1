#include "ronde/errors.h"

namespace ronde {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kMismatch: return "Mismatch";
    case ErrorCode::kTimeout: return "Timeout";
    case ErrorCode::kPeerLost: return "PeerLost";
    case ErrorCode::kAuth: return "Auth";
    case ErrorCode::kConfig: return "Config";
    case ErrorCode::kIo: return "Io";
    case ErrorCode::kAborted: return "Aborted";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

void throwCheckFailure(const char* condition, const char* file, int line,
                       const std::string& detail) {
  std::ostringstream out;
  out << "ronde internal check failed: " << condition << " at " << file << ":" << line;
  if (!detail.empty()) out << ": " << detail;
  throw Error(ErrorCode::kInternal, out.str());
}

}  // namespace ronde
