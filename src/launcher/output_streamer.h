// Carries every worker's stdout and stderr to where the user reads them, live.
//
// Prefixed mode (the default) writes each complete line as `[3]<stdout>:text` to the
// launcher's stdout (stderr lines to its stderr), one write per line so lines of different
// ranks never interleave mid-line. File mode (`--output-filename DIR`) writes the bytes as
// they come to DIR/rank.N/stdout and DIR/rank.N/stderr, N zero-padded so names sort by rank.
// A partial last line is written when its stream closes or at flushAll().
//
// Thread rules: one thread (the launcher's poll loop) uses an OutputStreamer.
#pragma once

#include <poll.h>

#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace ronde::launcher {

enum class StreamKind { kStdout, kStderr };

struct OutputOptions {
  std::string directory;          // empty: prefixed lines on the launcher's own streams
  bool timestamp_prefix = false;  // prefix lines with the wall-clock time as well
  int num_ranks = 1;              // for the width of rank.N directory names
};

class OutputStreamer {
 public:
  // Creates the per-rank directories in file mode: throws Error(kIo) naming the path.
  explicit OutputStreamer(OutputOptions options);
  OutputStreamer(const OutputStreamer&) = delete;
  OutputStreamer& operator=(const OutputStreamer&) = delete;

  // Reads `fd` until it closes, on behalf of `rank`.
  void add(int rank, StreamKind kind, UniqueFd fd);

  // Appends one pollfd per open stream to `fds`; after poll(), pass the same entries (from
  // `first`) to handle(). Returns how many were appended.
  size_t appendPollFds(std::vector<pollfd>* fds) const;
  void handle(const pollfd* fds, size_t count);

  bool allClosed() const;
  // Writes out partial lines of streams still open; used when the job ends.
  void flushAll();

 private:
  struct Stream {
    int rank;
    StreamKind kind;
    UniqueFd fd;
    std::string pending;  // prefixed mode: bytes after the last newline
    UniqueFd file;        // file mode: the destination
  };

  void readFrom(Stream& stream);
  void emitLines(Stream& stream, bool flush_partial);
  void writeLine(const Stream& stream, const char* data, size_t size);

  OutputOptions options_;
  std::vector<Stream> streams_;
};

}  // namespace ronde::launcher
