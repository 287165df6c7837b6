// ClaimEventWriter: writes the Events on pending claims (exporter/cluster/claim_events.h) as
// events.k8s.io/v1 Events through the API server: create, and a merge patch of `series` when
// the same Event is seen again. `kubectl get events` reads them as core/v1 Events.
#pragma once

#include <string>

#include "exporter/cluster/claim_events.h"
#include "nlohmann/json.hpp"
#include "src/k8s/client.h"

namespace dralens::app {

inline constexpr char kClaimEventController[] = "dralens.dev/cluster";

// The events.k8s.io/v1 Event for `event`, named "<claim>.<hex nanoseconds>" as client-go names
// them (the claim part cut so that the name stays within 253 characters).
nlohmann::json ClaimEventObject(const exporter::cluster::ClaimEvent& event,
                                const std::string& instance);

class ClaimEventWriter : public exporter::cluster::ClaimEventSink {
 public:
  // `instance` is reportingInstance (this replica's identity). `client` must outlive the writer.
  ClaimEventWriter(k8s::KubeClient& client, std::string instance)
      : client_(client), instance_(std::move(instance)) {}

  absl::StatusOr<std::string> Create(const exporter::cluster::ClaimEvent& event) override;
  absl::Status UpdateSeries(const std::string& ns, const std::string& name, int32_t count,
                            absl::Time last) override;

 private:
  k8s::KubeClient& client_;
  const std::string instance_;
};

}  // namespace dralens::app
