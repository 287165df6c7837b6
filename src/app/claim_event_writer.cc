#include "src/app/claim_event_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace dralens::app {
namespace {

constexpr size_t kMaxName = 253;

// metav1.MicroTime: RFC 3339 with microseconds.
std::string MicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

}  // namespace

nlohmann::json ClaimEventObject(const exporter::cluster::ClaimEvent& event,
                                const std::string& instance) {
  std::string suffix = absl::StrFormat(".%x", absl::ToUnixNanos(event.time));
  std::string name = event.claim.substr(0, kMaxName - suffix.size());
  // A name cut after a dot or dash would not be a DNS subdomain.
  while (!name.empty() && (name.back() == '.' || name.back() == '-')) {
    name.pop_back();
  }
  return {{"apiVersion", "events.k8s.io/v1"},
          {"kind", "Event"},
          {"metadata", {{"name", name + suffix}, {"namespace", event.ns}}},
          {"eventTime", MicroTime(event.time)},
          {"reportingController", kClaimEventController},
          {"reportingInstance", instance},
          {"action", "Allocate"},
          {"reason", event.reason},
          {"type", event.type},
          {"note", event.note},
          {"regarding",
           {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaim"},
            {"namespace", event.ns},
            {"name", event.claim},
            {"uid", event.uid}}}};
}

absl::StatusOr<std::string> ClaimEventWriter::Create(const exporter::cluster::ClaimEvent& event) {
  absl::StatusOr<nlohmann::json> created =
      client_.Create(k8s::kEvents, event.ns, ClaimEventObject(event, instance_));
  if (!created.ok()) {
    return created.status();
  }
  return created->value("/metadata/name"_json_pointer, std::string());
}

absl::Status ClaimEventWriter::UpdateSeries(const std::string& ns, const std::string& name,
                                            int32_t count, absl::Time last) {
  nlohmann::json patch = {{"series", {{"count", count}, {"lastObservedTime", MicroTime(last)}}}};
  return client_.MergePatch(k8s::kEvents, ns, name, patch, "").status();
}

}  // namespace dralens::app
