#include "src/common/keyed_mutex.h"

#include <algorithm>
#include <utility>

namespace dralens::common {

KeyedMutex::Guard::Guard(KeyedMutex& owner, std::vector<std::string> keys)
    : owner_(owner), keys_(std::move(keys)) {
  std::sort(keys_.begin(), keys_.end());
  keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());
  // Always in sorted order: two guards over overlapping keys never wait for each other in a
  // cycle.
  for (const std::string& key : keys_) {
    Entry* entry = nullptr;
    {
      absl::MutexLock lock(&owner_.mu_);
      std::unique_ptr<Entry>& slot = owner_.entries_[key];
      if (slot == nullptr) {
        slot = std::make_unique<Entry>();
      }
      ++slot->users;  // keeps the entry alive while this thread waits for it below
      entry = slot.get();
    }
    entry->mu.Lock();
  }
}

KeyedMutex::Guard::~Guard() {
  for (auto it = keys_.rbegin(); it != keys_.rend(); ++it) {
    absl::MutexLock lock(&owner_.mu_);
    auto found = owner_.entries_.find(*it);
    found->second->mu.Unlock();
    if (--found->second->users == 0) {
      owner_.entries_.erase(found);
    }
  }
}

size_t KeyedMutex::ActiveKeysForTest() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

int KeyedMutex::UsersForTest(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second->users;
}

}  // namespace dralens::common
