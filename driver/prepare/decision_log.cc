#include "driver/prepare/decision_log.h"

#include <utility>

namespace dralens::driver::prepare {

absl::string_view ToString(Operation operation) {
  return operation == Operation::kPrepare ? "prepare" : "unprepare";
}

void DecisionLog::Add(Decision decision) {
  absl::MutexLock lock(&mu_);
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(decision));
    return;
  }
  ring_[next_] = std::move(decision);
  next_ = (next_ + 1) % capacity_;
}

std::vector<DecisionLog::Decision> DecisionLog::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<Decision> out;
  out.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) {
    out.push_back(ring_[(next_ + i) % ring_.size()]);
  }
  return out;
}

}  // namespace dralens::driver::prepare
