// FakeClaimHandler: a scripted ClaimHandler for the plugin tests. By default every claim
// prepares with one device named after its UID and unprepares cleanly.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "driver/prepare/claim_handler.h"

namespace dralens::driver::plugin {

class FakeClaimHandler : public ClaimHandler {
 public:
  // ClaimHandler
  std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims,
                                               const KubeletCall& call) override {
    {
      absl::MutexLock gate(&gate_mu_);
      ++in_prepare_;
      gate_mu_.Await(absl::Condition(this, &FakeClaimHandler::Open));
      --in_prepare_;
    }
    absl::MutexLock lock(&mu_);
    prepare_calls_.push_back(claims);
    calls_.push_back(call);
    if (throw_) {
      throw std::runtime_error("fake handler failure");
    }
    std::map<std::string, PrepareResult> out;
    for (const ClaimRef& claim : claims) {
      if (omit_.contains(claim.uid)) {
        continue;
      }
      PrepareResult& result = out[claim.uid];
      if (auto it = errors_.find(claim.uid); it != errors_.end()) {
        result.error = it->second;
      } else if (auto dev = devices_.find(claim.uid); dev != devices_.end()) {
        result.devices = dev->second;
      } else {
        result.devices = {DefaultDevice(claim.uid)};
      }
    }
    if (extra_uid_.has_value()) {
      out[*extra_uid_].devices = {DefaultDevice(*extra_uid_)};
    }
    return out;
  }

  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims,
                                               const KubeletCall& call) override {
    absl::MutexLock lock(&mu_);
    unprepare_calls_.push_back(claims);
    calls_.push_back(call);
    if (throw_) {
      throw std::runtime_error("fake handler failure");
    }
    std::map<std::string, std::string> out;
    for (const ClaimRef& claim : claims) {
      if (omit_.contains(claim.uid)) {
        continue;
      }
      auto it = errors_.find(claim.uid);
      out[claim.uid] = it == errors_.end() ? "" : it->second;
    }
    if (extra_uid_.has_value()) {
      out[*extra_uid_] = "";
    }
    return out;
  }

  static PreparedDevice DefaultDevice(const std::string& uid) {
    return PreparedDevice{.request_names = {"gpu"},
                          .pool_name = "node-a",
                          .device_name = "gpu-0",
                          .cdi_device_ids = {"k8s.gpu.dralens.dev/claim=" + uid + "-gpu-0"},
                          .share_id = std::nullopt};
  }

  // Scripting; call before the claims arrive.
  void SetDevices(const std::string& uid, std::vector<PreparedDevice> devices) {
    absl::MutexLock lock(&mu_);
    devices_[uid] = std::move(devices);
  }
  void SetError(const std::string& uid, const std::string& error) {
    absl::MutexLock lock(&mu_);
    errors_[uid] = error;
  }
  void Omit(const std::string& uid) {
    absl::MutexLock lock(&mu_);
    omit_.insert(uid);
  }
  void AddUnrequested(const std::string& uid) {
    absl::MutexLock lock(&mu_);
    extra_uid_ = uid;
  }
  void Throw() {
    absl::MutexLock lock(&mu_);
    throw_ = true;
  }
  // While held, every Prepare waits at its start until Release().
  void Hold() {
    absl::MutexLock gate(&gate_mu_);
    held_ = true;
  }
  void Release() {
    absl::MutexLock gate(&gate_mu_);
    held_ = false;
  }
  // Prepares waiting at the gate.
  int InPrepare() {
    absl::MutexLock gate(&gate_mu_);
    return in_prepare_;
  }

  std::vector<std::vector<ClaimRef>> PrepareCalls() {
    absl::MutexLock lock(&mu_);
    return prepare_calls_;
  }
  std::vector<std::vector<ClaimRef>> UnprepareCalls() {
    absl::MutexLock lock(&mu_);
    return unprepare_calls_;
  }
  // What each call (prepare or unprepare, in order) said about the kubelet call.
  std::vector<KubeletCall> KubeletCalls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  bool Open() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_mu_) { return !held_; }

  absl::Mutex gate_mu_;
  bool held_ ABSL_GUARDED_BY(gate_mu_) = false;
  int in_prepare_ ABSL_GUARDED_BY(gate_mu_) = 0;
  absl::Mutex mu_;
  std::map<std::string, std::vector<PreparedDevice>> devices_;
  std::map<std::string, std::string> errors_;
  std::set<std::string> omit_;
  std::optional<std::string> extra_uid_;
  bool throw_ = false;
  std::vector<std::vector<ClaimRef>> prepare_calls_;
  std::vector<std::vector<ClaimRef>> unprepare_calls_;
  std::vector<KubeletCall> calls_;
};

}  // namespace dralens::driver::plugin
