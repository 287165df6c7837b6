#include "src/k8s/leader_elector.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/common/thread_name.h"

namespace dralens::k8s {
namespace {

// metav1.MicroTime, as client-go writes renewTime and acquireTime.
std::string MicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

}  // namespace

absl::StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::Create(
    KubeClient& client, LeaderElectionOptions options) {
  if (options.identity.empty()) {
    return absl::InvalidArgumentError("leader election: identity must not be empty");
  }
  if (options.lease_name.empty() || options.lease_namespace.empty()) {
    return absl::InvalidArgumentError(
        "leader election: lease name and namespace must not be empty");
  }
  if (!(options.retry_period > absl::ZeroDuration() &&
        options.retry_period < options.renew_deadline &&
        options.renew_deadline < options.lease_duration)) {
    return absl::InvalidArgumentError(
        "leader election: need 0 < retry period < renew deadline < lease duration");
  }
  return std::unique_ptr<LeaderElector>(new LeaderElector(client, std::move(options)));
}

LeaderElector::LeaderElector(KubeClient& client, LeaderElectionOptions options)
    : client_(client),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : common::RealClock()) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  thread_ = std::make_unique<std::thread>([this] {
    common::NameThisThread("leader-elect");
    Run();
  });
}

void LeaderElector::Stop() {
  {
    absl::MutexLock lock(&run_mu_);
    if (stopping_.exchange(true)) {
      return;
    }
  }
  if (thread_ != nullptr && thread_->joinable()) {
    thread_->join();
  }
  absl::MutexLock lock(&run_mu_);
  if (leader_.load()) {
    Release();
    SetLeader(false);
  }
}

void LeaderElector::Run() {
  absl::MutexLock lock(&run_mu_);
  while (!stopping_.load()) {
    TryAcquireOrRenew();
    // Paced in real time; expiry is judged on clock_, so a test with a fake clock drives
    // failover by advancing it while the rounds keep coming.
    run_mu_.AwaitWithTimeout(absl::Condition(
                                 +[](std::atomic<bool>* s) { return s->load(); }, &stopping_),
                             options_.retry_period);
  }
}

void LeaderElector::SetLeader(bool leader) {
  if (leader_.exchange(leader) == leader) {
    return;
  }
  DLOG(kInfo, "leader-election", leader ? "became leader" : "lost leadership",
       {{"lease", absl::StrCat(options_.lease_namespace, "/", options_.lease_name)},
        {"identity", options_.identity}});
  const auto& callback = leader ? options_.on_started_leading : options_.on_stopped_leading;
  if (callback) {
    callback();
  }
}

nlohmann::json LeaderElector::LeaseObject(const nlohmann::json& current, bool acquire) const {
  nlohmann::json lease = current;
  if (lease.is_null()) {
    lease = {
        {"apiVersion", kLeases.ApiVersion()},
        {"kind", kLeases.kind},
        {"metadata", {{"name", options_.lease_name}, {"namespace", options_.lease_namespace}}}};
  }
  nlohmann::json& spec = lease["spec"];
  if (!spec.is_object()) {
    spec = nlohmann::json::object();
  }
  const absl::Time now = clock_.Now();
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(options_.lease_duration))));
  spec["renewTime"] = MicroTime(now);
  if (acquire) {
    spec["acquireTime"] = MicroTime(now);
    int64_t transitions = spec.value("leaseTransitions", int64_t{0});
    if (!current.is_null() && !spec.value("holderIdentity", std::string()).empty()) {
      ++transitions;
    }
    spec["leaseTransitions"] = transitions;
  }
  return lease;
}

bool LeaderElector::TryAcquireOrRenew() {
  const absl::Time now = clock_.Now();
  const bool leader = leader_.load();
  auto step_down_if_late = [&] {
    if (leader && now - last_renew_ > options_.renew_deadline) {
      SetLeader(false);
    }
    return leader_.load();
  };
  absl::StatusOr<nlohmann::json> got =
      client_.Get(kLeases, options_.lease_namespace, options_.lease_name);
  if (!got.ok() && !k8s::IsNotFound(got.status())) {
    DLOG(kWarn, "leader-election", "cannot read the lease", {{"error", got.status().message()}});
    return step_down_if_late();
  }
  if (!got.ok()) {
    absl::StatusOr<nlohmann::json> created = client_.Create(
        kLeases, options_.lease_namespace, LeaseObject(nlohmann::json(), /*acquire=*/true));
    if (!created.ok()) {
      return step_down_if_late();
    }
    observed_record_ = (*created)["spec"].dump();
    observed_time_ = now;
    last_renew_ = now;
    SetLeader(true);
    return true;
  }
  const nlohmann::json spec = got->value("spec", nlohmann::json::object());
  const std::string record = spec.dump();
  if (record != observed_record_) {
    observed_record_ = record;
    observed_time_ = now;
  }
  const std::string holder = spec.value("holderIdentity", std::string());
  if (!holder.empty() && holder != options_.identity &&
      observed_time_ + options_.lease_duration > now) {
    SetLeader(false);
    return false;
  }
  absl::StatusOr<nlohmann::json> updated = client_.Update(
      kLeases, options_.lease_namespace, LeaseObject(*got, holder != options_.identity), "");
  if (!updated.ok()) {
    return step_down_if_late();
  }
  observed_record_ = (*updated)["spec"].dump();
  observed_time_ = now;
  last_renew_ = now;
  SetLeader(true);
  return true;
}

void LeaderElector::Release() {
  absl::StatusOr<nlohmann::json> got =
      client_.Get(kLeases, options_.lease_namespace, options_.lease_name);
  if (!got.ok()) {
    return;
  }
  nlohmann::json lease = *got;
  if (lease["spec"].value("holderIdentity", std::string()) != options_.identity) {
    return;
  }
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = MicroTime(clock_.Now());
  absl::StatusOr<nlohmann::json> updated =
      client_.Update(kLeases, options_.lease_namespace, lease, "");
  if (!updated.ok()) {
    DLOG(kWarn, "leader-election", "cannot release the lease",
         {{"error", updated.status().message()}});
  }
}

}  // namespace dralens::k8s
