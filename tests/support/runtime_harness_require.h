// REQUIRE for runtime test bodies: they run in forked children, where a gtest EXPECT is not
// seen by the parent; a thrown message is.
#pragma once

#include <sstream>
#include <stdexcept>

#define REQUIRE(cond, ...)                                                                  \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::ostringstream require_out_;                                                      \
      require_out_ << __FILE__ << ":" << __LINE__ << ": " #cond " failed: " << __VA_ARGS__; \
      throw std::runtime_error(require_out_.str());                                         \
    }                                                                                       \
  } while (0)
