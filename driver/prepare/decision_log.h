// DecisionLog: the last outcomes of claim operations, newest last, for /debug/claims: what this
// node did with each claim and why. Bounded; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "driver/prepare/failure_reason.h"

namespace dralens::driver::prepare {

enum class Operation { kPrepare, kUnprepare };
// "prepare" | "unprepare".
absl::string_view ToString(Operation operation);

class DecisionLog {
 public:
  struct Decision {
    absl::Time time;
    Operation operation = Operation::kPrepare;
    std::string namespace_name;
    std::string name;
    std::string uid;
    FailureReason reason = FailureReason::kNone;
    std::string error;  // the message the kubelet got; "" on success
    absl::Duration duration;
    std::string trace_id;  // the claim's lifecycle trace
  };

  explicit DecisionLog(size_t capacity = 256) : capacity_(capacity) {}
  void Add(Decision decision) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<Decision> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<Decision> ring_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // where the next one goes once the ring is full
};

}  // namespace dralens::driver::prepare
