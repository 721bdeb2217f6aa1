// ronde's one error policy: every failure a user can cause or observe is a ronde::Error
// carrying an ErrorCode; broken internal invariants are InternalError via RONDE_CHECK.
// The Python binding maps each code to one exception class in one place.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ronde {

enum class ErrorCode {
  kInvalidArgument,  // the caller passed something wrong (this rank alone)
  kMismatch,         // ranks disagree on a collective (count, dtype, op, root, ...)
  kTimeout,          // a wait outlived its deadline
  kPeerLost,         // a peer died or closed its connection
  kAuth,             // a connection did not prove it knows the job secret
  kConfig,           // a bad setting (environment variable or option)
  kIo,               // the operating system refused (socket, shm, file)
  kAborted,          // the communicator was aborted earlier; see the first error
  kInternal,         // a broken invariant inside ronde: a bug
};

const char* errorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Builds a message from stream pieces: throw makeError(ErrorCode::kIo, "bind ", addr, ": ", why);
template <typename... Parts>
Error makeError(ErrorCode code, const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return Error(code, out.str());
}

[[noreturn]] void throwCheckFailure(const char* condition, const char* file, int line,
                                    const std::string& detail);

}  // namespace ronde

// Invariant checks: a failure here is a bug in ronde, never a user error. The optional
// detail is a stream expression: RONDE_CHECK(n > 0, "n is " << n).
#define RONDE_CHECK(cond, ...)                                                          \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::ostringstream ronde_check_detail_;                                           \
      ronde_check_detail_ << "" __VA_ARGS__;                                            \
      ::ronde::throwCheckFailure(#cond, __FILE__, __LINE__, ronde_check_detail_.str()); \
    }                                                                                   \
  } while (0)
