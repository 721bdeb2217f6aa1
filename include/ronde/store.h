// Rendezvous: ranks meet through a key-value store before any data moves.
//
// A Store maps string keys to byte values. Values are written once per key by convention
// (set overwrites), read with a blocking get that waits until the key exists or the timeout
// passes. Every implementation is safe for concurrent use from several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ronde {

using Bytes = std::vector<uint8_t>;
using Duration = std::chrono::milliseconds;

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until `key` exists, then returns its value. Throws Error(kTimeout) naming the key.
  virtual Bytes get(const std::string& key, Duration timeout) = 0;
  // Returns the value if the key exists now, without waiting.
  virtual bool tryGet(const std::string& key, Bytes* value) = 0;
  // tryGet for a poll that must not outlast its caller's own deadline: a store that has not
  // answered within `answer_bound` throws Error(kTimeout) and stays usable (unlike abandon).
  // Stores that answer without a server to wait for need not override it; wrappers pass it on.
  virtual bool tryGetWithin(const std::string& key, Bytes* value, Duration answer_bound) {
    (void)answer_bound;
    return tryGet(key, value);
  }
  // Atomically adds `delta` to the integer stored at key (missing = 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual void erase(const std::string& key) = 0;
  // Gives up on the store's server, known to be frozen or gone (the liveness monitor's verdict
  // on the rank that serves it): a call waiting for it and every later call throw
  // Error(kPeerLost) at once instead of waiting out their timeouts. Stores without a server to
  // wait for ignore it; wrappers pass it on.
  virtual void abandon() {}

  // Convenience for text values.
  void setString(const std::string& key, const std::string& value);
  std::string getString(const std::string& key, Duration timeout);
};

// Keys of `inner` seen under `prefix/`: one store serves several communicators or
// re-initialisations without their keys colliding.
class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> inner, std::string prefix);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Duration timeout) override;
  bool tryGet(const std::string& key, Bytes* value) override;
  bool tryGetWithin(const std::string& key, Bytes* value, Duration answer_bound) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void erase(const std::string& key) override;
  void abandon() override { inner_->abandon(); }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

// In-process store for tests that run ranks as threads.
std::shared_ptr<Store> makeMemoryStore();

// A store on a shared directory (NFS or local): one file per key, written atomically.
std::shared_ptr<Store> makeFileStore(const std::string& directory);

// Client of a TcpStoreServer. When `secret` is non-empty the connection proves it knows the
// job secret (HMAC-SHA256 challenge) before any request; the server refuses it otherwise.
std::shared_ptr<Store> makeTcpStore(const std::string& host, int port, const std::string& secret,
                                    Duration connect_timeout);

// Serves a store over TCP from a background thread until destroyed. Port 0 picks a free port.
//
// With a secret, a connection that has not proven it yet is unauthenticated: at most
// `max_unauthenticated` of them are held, each for at most `handshake_timeout`. At the cap,
// new connections wait in the kernel's backlog until a slot frees or the oldest pending one
// has had `evictable_after`, which is then dropped for the newcomer. When accept() fails
// (out of descriptors: EMFILE/ENFILE) the server stops polling its listener for a growing
// pause (up to 1 s) instead of spinning, and logs once per episode.
class TcpStoreServer {
 public:
  struct Limits {
    size_t max_unauthenticated = 128;
    Duration handshake_timeout{10000};
    Duration evictable_after{1000};
  };

  TcpStoreServer(const std::string& bind_address, int port, const std::string& secret)
      : TcpStoreServer(bind_address, port, secret, Limits{}) {}
  TcpStoreServer(const std::string& bind_address, int port, const std::string& secret,
                 const Limits& limits);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ronde
