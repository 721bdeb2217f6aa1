#include <charconv>

#include "rendezvous/counter.h"
#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {

void Store::setString(const std::string& key, const std::string& value) {
  set(key, Bytes(value.begin(), value.end()));
}

std::string Store::getString(const std::string& key, Duration timeout) {
  Bytes value = get(key, timeout);
  return std::string(value.begin(), value.end());
}

PrefixStore::PrefixStore(std::shared_ptr<Store> inner, std::string prefix)
    : inner_(std::move(inner)), prefix_(std::move(prefix)) {
  if (!inner_) throw makeError(ErrorCode::kInvalidArgument, "PrefixStore needs an inner store");
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(full(key), value); }

Bytes PrefixStore::get(const std::string& key, Duration timeout) {
  return inner_->get(full(key), timeout);
}

bool PrefixStore::tryGet(const std::string& key, Bytes* value) {
  return inner_->tryGet(full(key), value);
}

bool PrefixStore::tryGetWithin(const std::string& key, Bytes* value, Duration answer_bound) {
  return inner_->tryGetWithin(full(key), value, answer_bound);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return inner_->add(full(key), delta);
}

void PrefixStore::erase(const std::string& key) { inner_->erase(full(key)); }

int64_t parseCounter(const std::string& key, const Bytes& value) {
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  int64_t number = 0;
  auto [stop, error] = std::from_chars(begin, end, number);
  if (value.empty() || error != std::errc() || stop != end) {
    throw makeError(ErrorCode::kInvalidArgument, "store key '", key,
                    "' holds a value that is not an integer counter; add() cannot use it");
  }
  return number;
}

Bytes formatCounter(int64_t value) {
  std::string text = std::to_string(value);
  return Bytes(text.begin(), text.end());
}

}  // namespace ronde
