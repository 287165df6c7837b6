// ThreadSanitizer builds only: makes absl's Mutex, CondVar and Notification visible to TSan.
//
// Debian's abseil is built without TSan, so its Mutex::Lock/Unlock (in the shared library) never
// tell TSan that they order memory; every field guarded by an absl::Mutex would then be reported
// as a data race. This file defines those entry points in the binary, where they take precedence
// over the shared library's: each forwards to the library's definition (found with
// dlsym(RTLD_NEXT)) and adds the happens-before edge TSan needs (__tsan_release before a lock is
// given up, __tsan_acquire after it is taken, keyed by the object's address). In any other build
// this file is empty.
#include "absl/base/config.h"

#ifdef ABSL_HAVE_THREAD_SANITIZER

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#define DRALENS_STR2(x) #x
#define DRALENS_STR(x) DRALENS_STR2(x)

namespace absl {
ABSL_NAMESPACE_BEGIN
namespace {

// The library's definition of `suffix` (the mangled name after the absl namespaces).
template <typename Fn>
Fn Next(bool is_const, const char* suffix) {
  const char* ns = DRALENS_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  std::string name = std::string(is_const ? "_ZNK4absl" : "_ZN4absl") +
                     std::to_string(std::strlen(ns)) + ns + suffix;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

#define DRALENS_NEXT(type, is_const, suffix) static const auto real = Next<type>(is_const, suffix)

// The mutex whose lock this thread is giving up or waiting for, while it is inside the library.
// absl evaluates a Condition inside the library with the lock held: in the waiter once it holds
// the lock again (before the wrapper could tell TSan), or in the thread that is unlocking (after
// the wrapper's release). Condition::Eval below brackets the evaluation with that mutex.
thread_local Mutex* in_library = nullptr;

class InLibrary {
 public:
  explicit InLibrary(Mutex* mu) : saved_(in_library) { in_library = mu; }
  ~InLibrary() { in_library = saved_; }
  InLibrary(const InLibrary&) = delete;
  InLibrary& operator=(const InLibrary&) = delete;

 private:
  Mutex* saved_;
};

}  // namespace

bool Condition::Eval() const {
  DRALENS_NEXT(bool (*)(const Condition*), true, "9Condition4EvalEv");
  Mutex* mu = in_library;
  if (mu == nullptr) {
    return real(this);
  }
  __tsan_acquire(mu);
  bool result = real(this);
  __tsan_release(mu);
  return result;
}

void Mutex::Lock() {
  DRALENS_NEXT(void (*)(Mutex*), false, "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  DRALENS_NEXT(void (*)(Mutex*), false, "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  DRALENS_NEXT(bool (*)(Mutex*), false, "5Mutex7TryLockEv");
  bool locked = real(this);
  if (locked) {
    __tsan_acquire(this);
  }
  return locked;
}

bool Mutex::ReaderTryLock() {
  DRALENS_NEXT(bool (*)(Mutex*), false, "5Mutex13ReaderTryLockEv");
  bool locked = real(this);
  if (locked) {
    __tsan_acquire(this);
  }
  return locked;
}

void Mutex::Unlock() {
  DRALENS_NEXT(void (*)(Mutex*), false, "5Mutex6UnlockEv");
  __tsan_release(this);
  InLibrary in_library_guard(this);
  real(this);
}

// A reader's release orders its reads before the next writer's writes.
void Mutex::ReaderUnlock() {
  DRALENS_NEXT(void (*)(Mutex*), false, "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  InLibrary in_library_guard(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  InLibrary in_library_guard(this);
  DRALENS_NEXT(void (*)(Mutex*, const Condition&), false, "5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  InLibrary in_library_guard(this);
  DRALENS_NEXT(bool (*)(Mutex*, const Condition&, Duration), false,
               "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool met = real(this, cond, timeout);
  __tsan_acquire(this);  // held on return either way
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  InLibrary in_library_guard(this);
  DRALENS_NEXT(bool (*)(Mutex*, const Condition&, Time), false,
               "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

// Await gives the lock up while it waits and holds it again on return.
void Mutex::Await(const Condition& cond) {
  InLibrary in_library_guard(this);
  DRALENS_NEXT(void (*)(Mutex*, const Condition&), false, "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  InLibrary in_library_guard(this);
  DRALENS_NEXT(bool (*)(Mutex*, const Condition&, Duration), false,
               "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  InLibrary in_library_guard(this);
  DRALENS_NEXT(bool (*)(Mutex*, const Condition&, Time), false,
               "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  DRALENS_NEXT(void (*)(CondVar*, Mutex*), false, "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  DRALENS_NEXT(bool (*)(CondVar*, Mutex*, Duration), false,
               "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  DRALENS_NEXT(bool (*)(CondVar*, Mutex*, Time), false,
               "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  DRALENS_NEXT(void (*)(Notification*), false, "12Notification6NotifyEv");
  __tsan_release(this);
  __tsan_release(const_cast<std::atomic<bool>*>(
      &notified_yet_));  // HasBeenNotified() (inline) loads it with acquire
  real(this);
}

void Notification::WaitForNotification() const {
  DRALENS_NEXT(void (*)(const Notification*), true, "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  DRALENS_NEXT(bool (*)(const Notification*, Duration), true,
               "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  bool notified = real(this, timeout);
  if (notified) {
    __tsan_acquire(const_cast<Notification*>(this));
  }
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  DRALENS_NEXT(bool (*)(const Notification*, Time), true,
               "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  bool notified = real(this, deadline);
  if (notified) {
    __tsan_acquire(const_cast<Notification*>(this));
  }
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl

#endif  // ABSL_HAVE_THREAD_SANITIZER
