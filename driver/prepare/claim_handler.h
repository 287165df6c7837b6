// ClaimHandler: what the kubelet's NodePrepareResources / NodeUnprepareResources calls reach.
//
// The gRPC adapter (driver/plugin) translates the v1 and v1beta1 protos into these plain types;
// the ClaimPreparer (driver/prepare) implements them. Keeping the boundary proto-free lets the
// preparer be tested without gRPC and the adapter without a preparer.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/telemetry/tracing/trace_context.h"

namespace dralens::driver {

// The three fields the kubelet sends for a claim, and nothing else.
struct ClaimRef {
  std::string namespace_name;
  std::string uid;
  std::string name;
};

struct PreparedDevice {
  std::vector<std::string> request_names;  // "req/sub" already stripped to "req"
  std::string pool_name;
  std::string device_name;
  std::vector<std::string> cdi_device_ids;  // fully qualified: vendor/class=name
  std::optional<std::string> share_id;      // v1 only (consumable capacity)
  bool operator==(const PreparedDevice&) const = default;
};

// One claim's outcome: devices on success, or a non-empty error.
struct PrepareResult {
  std::vector<PreparedDevice> devices;
  std::string error;
};

// The kubelet call that carried a batch of claims.
struct KubeletCall {
  // The call's server span (invalid when tracing is off): each claim span links to it.
  telemetry::SpanContext span;
};

class ClaimHandler {
 public:
  virtual ~ClaimHandler() = default;
  // Exactly one entry per distinct claim UID in `claims`. Per-claim failures go into the
  // entry's error; the call itself never fails. Thread-safe.
  virtual std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims,
                                                       const KubeletCall& call) = 0;
  // Exactly one entry per distinct claim UID; the value is "" on success or the error.
  virtual std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims,
                                                       const KubeletCall& call) = 0;
};
using ClaimHandlerPtr = std::unique_ptr<ClaimHandler>;

}  // namespace dralens::driver
