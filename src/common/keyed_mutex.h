// KeyedMutex: one mutex per string key, existing only while someone holds or waits for it.
//
//   KeyedMutex claims;
//   {
//     KeyedMutex::Guard lock(claims, {uid});          // one key
//     KeyedMutex::Guard both(devices, {"gpu-1", "gpu-0"});  // several, always in sorted order
//   }
//
// A Guard takes its keys in sorted order (duplicates collapsed) and releases them in reverse,
// so two holders of overlapping key sets can never deadlock. Memory follows the keys in use,
// not every key ever seen.
//
// Thread-safety: a KeyedMutex may be shared by any number of threads; a Guard belongs to the
// thread that made it. The KeyedMutex must outlive its guards. Not reentrant: a thread that
// already holds a key and asks for it again deadlocks.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dralens::common {

class KeyedMutex {
 public:
  KeyedMutex() = default;
  KeyedMutex(const KeyedMutex&) = delete;
  KeyedMutex& operator=(const KeyedMutex&) = delete;

  class Guard {
   public:
    // Blocks until every key of `keys` is held by this guard.
    Guard(KeyedMutex& owner, std::vector<std::string> keys);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    KeyedMutex& owner_;
    std::vector<std::string> keys_;  // sorted, distinct
  };

  // How many keys have a mutex right now (held or waited for). For tests.
  size_t ActiveKeysForTest() const;
  // How many guards hold or wait for `key` right now. For tests.
  int UsersForTest(const std::string& key) const;

 private:
  struct Entry {
    absl::Mutex mu;
    int users = 0;  // holders and waiters
  };
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::common
