// A store on a shared directory: one file per key. Writers publish with write-temp + rename,
// so a reader sees either no file or the whole value, never a torn one; add() serialises its
// read-modify-write across processes with flock() on one lock file in the directory.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/secret_handshake.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "rendezvous/counter.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {
namespace {

// Names starting with '.' are ours (lock and temp files); escaped keys never start with '.'.
constexpr const char* kLockName = ".lock";
// Well below NAME_MAX (255) so the hashed form below always fits.
constexpr size_t kMaxNameLength = 200;

bool isSafeNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// Keys are arbitrary strings ("prefix/rank/3"); file names must be flat and portable.
std::string fileNameFor(const std::string& key) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string name;
  for (char c : key) {
    if (isSafeNameChar(c)) {
      name.push_back(c);
    } else {
      name.push_back('%');
      name.push_back(kDigits[uint8_t(c) >> 4]);
      name.push_back(kDigits[uint8_t(c) & 0xf]);
    }
  }
  if (name.empty()) name = "%";  // the empty key still needs a file of its own
  // Long keys keep a readable head and a hash that keeps them distinct.
  if (name.size() > kMaxNameLength) name = name.substr(0, 120) + "~" + toHex(sha256(key));
  return name;
}

std::string ioError(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

class FileStore : public Store {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {
    std::error_code error;
    std::filesystem::create_directories(directory_, error);
    if (error || !std::filesystem::is_directory(directory_)) {
      throw makeError(ErrorCode::kIo, "file store: cannot use directory ", directory_, ": ",
                      error ? error.message() : "not a directory");
    }
  }

  void set(const std::string& key, const Bytes& value) override { publish(key, value); }

  Bytes get(const std::string& key, Duration timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // Start polling fast (ranks usually arrive together), then back off to spare the disk.
    auto pause = std::chrono::milliseconds(1);
    Bytes value;
    while (!tryGet(key, &value)) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        throw makeError(ErrorCode::kTimeout, "file store ", directory_, ": key '", key,
                        "' was not set within ", timeout.count(), " ms");
      }
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    return value;
  }

  bool tryGet(const std::string& key, Bytes* value) override {
    const std::string path = pathFor(key);
    UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file) {
      if (errno == ENOENT) return false;
      throw makeError(ErrorCode::kIo, "file store: ", ioError("open", path));
    }
    Bytes contents;
    uint8_t buffer[4096];
    for (;;) {
      ssize_t got = ::read(file.get(), buffer, sizeof(buffer));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw makeError(ErrorCode::kIo, "file store: ", ioError("read", path));
      if (got == 0) break;
      contents.insert(contents.end(), buffer, buffer + got);
    }
    if (value) *value = std::move(contents);
    return true;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    const std::string lock_path = directory_ + "/" + kLockName;
    // A fresh open file description per call: flock() then excludes other threads of this
    // process as well as other processes, and the kernel drops it if we die holding it.
    UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!lock) throw makeError(ErrorCode::kIo, "file store: ", ioError("open", lock_path));
    while (::flock(lock.get(), LOCK_EX) != 0) {
      if (errno != EINTR) throw makeError(ErrorCode::kIo, "file store: ", ioError("flock", lock_path));
    }
    Bytes current;
    int64_t result = (tryGet(key, &current) ? parseCounter(key, current) : 0) + delta;
    publish(key, formatCounter(result));
    return result;  // closing `lock` releases the flock
  }

  void erase(const std::string& key) override {
    const std::string path = pathFor(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      throw makeError(ErrorCode::kIo, "file store: ", ioError("unlink", path));
    }
  }

 private:
  std::string pathFor(const std::string& key) const { return directory_ + "/" + fileNameFor(key); }

  // No fsync: the store coordinates live processes, and rename alone gives readers the
  // all-or-nothing view; durability across a machine crash buys nothing here.
  void publish(const std::string& key, const Bytes& value) {
    // A random name keeps concurrent writers (threads or hosts) off each other's temp files.
    const std::string temp_path = directory_ + "/.tmp-" + fileNameFor(randomBytes(12));
    {
      UniqueFd file(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      if (!file) throw makeError(ErrorCode::kIo, "file store: ", ioError("create", temp_path));
      size_t written = 0;
      while (written < value.size()) {
        ssize_t put = ::write(file.get(), value.data() + written, value.size() - written);
        if (put < 0 && errno == EINTR) continue;
        if (put < 0) {
          std::string message = ioError("write", temp_path);
          ::unlink(temp_path.c_str());
          throw makeError(ErrorCode::kIo, "file store: ", message);
        }
        written += size_t(put);
      }
    }
    const std::string path = pathFor(key);
    if (::rename(temp_path.c_str(), path.c_str()) != 0) {
      std::string message = ioError("rename to", path);
      ::unlink(temp_path.c_str());
      throw makeError(ErrorCode::kIo, "file store: ", message);
    }
  }

  const std::string directory_;
};

}  // namespace

std::shared_ptr<Store> makeFileStore(const std::string& directory) {
  return std::make_shared<FileStore>(directory);
}

}  // namespace ronde
