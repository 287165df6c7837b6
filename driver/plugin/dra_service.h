// DraService: the kubelet's DRA node service (`DRAPlugin`, reference dra-protocol.md §2) as a
// thin adapter over ClaimHandler. Both k8s.io.kubelet.pkg.apis.dra.v1 and ...v1beta1 are served
// on the same socket; each has its own generated classes (the only difference is v1's
// Device.share_id) and both go through the same proto-free PrepareClaims/UnprepareClaims.
//
// Contract towards the kubelet, for prepare and unprepare alike:
//  - exactly one response entry per requested claim UID, duplicates in the request collapsed;
//  - per-claim failures are that entry's error, never a gRPC error (a gRPC error makes the
//    kubelet drop the whole response);
//  - an empty request is answered at once with an empty map (liveness probes send one).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "driver/plugin/call_telemetry.h"
#include "driver/prepare/claim_handler.h"
#include "driver/proto/dra/v1/api.grpc.pb.h"
#include "driver/proto/dra/v1beta1/api.grpc.pb.h"

namespace dralens::driver::plugin {

namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

// Calls handler.Prepare once with the distinct, well-formed claims of `claims` (first
// occurrence of a UID wins) and returns exactly one entry per distinct UID in `claims`:
//  - a claim without uid, name or namespace gets an error entry and never reaches the handler;
//  - a UID the handler left out becomes an error entry; entries for UIDs nobody asked for are
//    dropped (the kubelet treats them as an error);
//  - an exception from the handler becomes an error entry for each claim it was given.
// `api` ("v1", "v1beta1") only labels log lines. Thread-safe if the handler is.
// `call` reaches the handler as is (its span is what claim spans link to).
std::map<std::string, PrepareResult> PrepareClaims(ClaimHandler& handler,
                                                   const std::vector<ClaimRef>& claims,
                                                   absl::string_view api, const KubeletCall& call);
// The same for handler.Unprepare; the value is "" on success or the claim's error.
std::map<std::string, std::string> UnprepareClaims(ClaimHandler& handler,
                                                   const std::vector<ClaimRef>& claims,
                                                   absl::string_view api, const KubeletCall& call);

// k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin. Thread-safe; `handler` must outlive the service.
class DraServiceV1 final : public dra_v1::DRAPlugin::Service {
 public:
  DraServiceV1(ClaimHandler& handler, CallTelemetry telemetry)
      : handler_(handler), telemetry_(telemetry) {}

  // dra_v1::DRAPlugin::Service
  grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                    const dra_v1::NodePrepareResourcesRequest* request,
                                    dra_v1::NodePrepareResourcesResponse* response) override;
  grpc::Status NodeUnprepareResources(grpc::ServerContext* context,
                                      const dra_v1::NodeUnprepareResourcesRequest* request,
                                      dra_v1::NodeUnprepareResourcesResponse* response) override;

 private:
  ClaimHandler& handler_;
  CallTelemetry telemetry_;
};

// k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin (1.32/1.33 kubelets). PreparedDevice.share_id
// has no field here and is not sent. Thread-safe; `handler` must outlive the service.
class DraServiceV1beta1 final : public dra_v1beta1::DRAPlugin::Service {
 public:
  DraServiceV1beta1(ClaimHandler& handler, CallTelemetry telemetry)
      : handler_(handler), telemetry_(telemetry) {}

  // dra_v1beta1::DRAPlugin::Service
  grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                    const dra_v1beta1::NodePrepareResourcesRequest* request,
                                    dra_v1beta1::NodePrepareResourcesResponse* response) override;
  grpc::Status NodeUnprepareResources(
      grpc::ServerContext* context, const dra_v1beta1::NodeUnprepareResourcesRequest* request,
      dra_v1beta1::NodeUnprepareResourcesResponse* response) override;

 private:
  ClaimHandler& handler_;
  CallTelemetry telemetry_;
};

}  // namespace dralens::driver::plugin
