// WeightedCache: a least-recently-used map bounded in entries and in total weight (the
// bytes each value holds). Not thread-safe: its owner locks around it.
#ifndef FERRY_SERVER_STORAGE_WEIGHTED_CACHE_H_
#define FERRY_SERVER_STORAGE_WEIGHTED_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"

namespace ferry {

template <typename Key, typename Value>
class WeightedCache {
 public:
  WeightedCache(size_t max_entries, uint64_t max_weight)
      : max_entries_(max_entries), max_weight_(max_weight) {}

  // The value under `key`, now the most recently used; null when absent.
  const Value* Find(const Key& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return &it->second.value;
  }

  // Puts `value` under `key` (replacing what was there) as the most recently used, then
  // evicts from the least recently used end while past a bound, always keeping the new
  // entry. Returns how many it evicted.
  size_t Insert(const Key& key, Value value, uint64_t weight) {
    Erase(key);
    lru_.push_front(key);
    entries_.emplace(key, Slot{std::move(value), weight, lru_.begin()});
    weight_ += weight;
    size_t evicted = 0;
    while (entries_.size() > 1 && (entries_.size() > max_entries_ || weight_ > max_weight_)) {
      EvictOldest();
      ++evicted;
    }
    return evicted;
  }

  bool Erase(const Key& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    weight_ -= it->second.weight;
    lru_.erase(it->second.lru);
    entries_.erase(it);
    return true;
  }

  // Drops the least recently used entry; false when there is none.
  bool EvictOldest() {
    if (lru_.empty()) return false;
    return Erase(lru_.back());
  }

  // Drops every entry for which `doomed` is true; how many.
  size_t EraseIf(absl::FunctionRef<bool(const Key&, const Value&)> doomed) {
    std::vector<Key> keys;
    for (const auto& [key, slot] : entries_) {
      if (doomed(key, slot.value)) keys.push_back(key);
    }
    for (const Key& key : keys) Erase(key);
    return keys.size();
  }

  size_t size() const { return entries_.size(); }
  uint64_t weight() const { return weight_; }

 private:
  struct Slot {
    Value value;
    uint64_t weight;
    typename std::list<Key>::iterator lru;
  };
  const size_t max_entries_;
  const uint64_t max_weight_;
  std::list<Key> lru_;  // most recently used first
  absl::flat_hash_map<Key, Slot> entries_;
  uint64_t weight_ = 0;
};

}  // namespace ferry

#endif  // FERRY_SERVER_STORAGE_WEIGHTED_CACHE_H_
