// add() keeps counters as decimal text, so getString() on a counter reads naturally and
// every store backend (and every process of a job) agrees on the encoding.
#pragma once

#include <cstdint>
#include <string>

#include "ronde/store.h"

namespace ronde {

// Throws Error(kInvalidArgument) naming the key if the value is not a decimal integer.
int64_t parseCounter(const std::string& key, const Bytes& value);
Bytes formatCounter(int64_t value);

}  // namespace ronde
