#include "launcher/output_streamer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

// Lines longer than this are cut, so one chatty rank cannot hold unbounded memory.
constexpr size_t kMaxLine = 64 * 1024;

void writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed terminal or pipe: nothing useful left to do
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void makeDirectory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    throw makeError(ErrorCode::kIo, "--output-filename: cannot create ", path, ": ",
                    std::strerror(errno));
  }
}

std::string rankDirectoryName(int rank, int num_ranks) {
  std::string digits = std::to_string(rank);
  size_t width = std::to_string(std::max(num_ranks - 1, 0)).size();
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return "rank." + digits;
}

std::string timestamp() {
  timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  tm local;
  ::localtime_r(&now.tv_sec, &local);
  char text[40];
  size_t length = std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  std::snprintf(text + length, sizeof(text) - length, ".%03ld ", now.tv_nsec / 1000000);
  return text;
}

}  // namespace

OutputStreamer::OutputStreamer(OutputOptions options) : options_(std::move(options)) {
  if (options_.directory.empty()) return;
  makeDirectory(options_.directory);
  for (int rank = 0; rank < options_.num_ranks; ++rank) {
    makeDirectory(options_.directory + "/" + rankDirectoryName(rank, options_.num_ranks));
  }
}

void OutputStreamer::add(int rank, StreamKind kind, UniqueFd fd) {
  Stream stream{rank, kind, std::move(fd), {}, UniqueFd()};
  ::fcntl(stream.fd.get(), F_SETFL, ::fcntl(stream.fd.get(), F_GETFL) | O_NONBLOCK);
  if (!options_.directory.empty()) {
    std::string path = options_.directory + "/" + rankDirectoryName(rank, options_.num_ranks) +
                       (kind == StreamKind::kStdout ? "/stdout" : "/stderr");
    stream.file.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!stream.file) {
      throw makeError(ErrorCode::kIo, "--output-filename: cannot write ", path, ": ",
                      std::strerror(errno));
    }
  }
  streams_.push_back(std::move(stream));
}

size_t OutputStreamer::appendPollFds(std::vector<pollfd>* fds) const {
  size_t appended = 0;
  for (const Stream& stream : streams_) {
    if (!stream.fd) continue;
    fds->push_back(pollfd{stream.fd.get(), POLLIN, 0});
    ++appended;
  }
  return appended;
}

void OutputStreamer::handle(const pollfd* fds, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    for (Stream& stream : streams_) {
      if (stream.fd && stream.fd.get() == fds[i].fd) {
        readFrom(stream);
        break;
      }
    }
  }
}

bool OutputStreamer::allClosed() const {
  for (const Stream& stream : streams_) {
    if (stream.fd) return false;
  }
  return true;
}

void OutputStreamer::flushAll() {
  for (Stream& stream : streams_) {
    if (stream.fd) readFrom(stream);
    emitLines(stream, /*flush_partial=*/true);
  }
}

void OutputStreamer::readFrom(Stream& stream) {
  char buffer[16384];
  while (stream.fd) {
    ssize_t got = ::read(stream.fd.get(), buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return;
    if (got <= 0) {
      stream.fd.reset();
      emitLines(stream, /*flush_partial=*/true);
      return;
    }
    if (stream.file) {
      writeAll(stream.file.get(), buffer, static_cast<size_t>(got));
    } else {
      stream.pending.append(buffer, static_cast<size_t>(got));
      emitLines(stream, /*flush_partial=*/false);
    }
  }
}

void OutputStreamer::emitLines(Stream& stream, bool flush_partial) {
  size_t start = 0;
  while (true) {
    size_t newline = stream.pending.find('\n', start);
    if (newline == std::string::npos) break;
    writeLine(stream, stream.pending.data() + start, newline - start);
    start = newline + 1;
  }
  stream.pending.erase(0, start);
  while (stream.pending.size() > kMaxLine) {
    writeLine(stream, stream.pending.data(), kMaxLine);
    stream.pending.erase(0, kMaxLine);
  }
  if (flush_partial && !stream.pending.empty()) {
    writeLine(stream, stream.pending.data(), stream.pending.size());
    stream.pending.clear();
  }
}

void OutputStreamer::writeLine(const Stream& stream, const char* data, size_t size) {
  bool is_stdout = stream.kind == StreamKind::kStdout;
  std::string line;
  line.reserve(size + 48);
  if (options_.timestamp_prefix) line += timestamp();
  line += "[" + std::to_string(stream.rank) + "]" + (is_stdout ? "<stdout>:" : "<stderr>:");
  line.append(data, size);
  line += '\n';
  writeAll(is_stdout ? STDOUT_FILENO : STDERR_FILENO, line.data(), line.size());
}

}  // namespace ronde::launcher
