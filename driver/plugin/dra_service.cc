#include "driver/plugin/dra_service.h"

#include <exception>
#include <set>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/telemetry/tracing/trace_context.h"
#include "src/telemetry/tracing/tracer_impl.h"

namespace dralens::driver::plugin {
namespace {

// The claims worth handing to the handler, and the error entries decided without it.
template <typename Result>
struct ClaimBatch {
  std::vector<ClaimRef> valid;             // distinct UIDs, request order
  std::map<std::string, Result> rejected;  // malformed claims, keyed by UID
};

std::string MissingFieldError(const ClaimRef& claim) {
  if (claim.uid.empty()) {
    return "claim has no uid";
  }
  if (claim.name.empty()) {
    return "claim has no name";
  }
  if (claim.namespace_name.empty()) {
    return "claim has no namespace";
  }
  return "";
}

template <typename Result>
ClaimBatch<Result> Split(const std::vector<ClaimRef>& claims, absl::string_view api,
                         absl::string_view rpc) {
  ClaimBatch<Result> batch;
  std::set<std::string> seen;
  for (const ClaimRef& claim : claims) {
    if (!seen.insert(claim.uid).second) {
      continue;  // duplicate UID: one entry answers all of them
    }
    std::string error = MissingFieldError(claim);
    if (error.empty()) {
      batch.valid.push_back(claim);
      continue;
    }
    DLOG(kWarn, "plugin", "malformed claim in kubelet request",
         {{"api", api}, {"rpc", rpc}, {"uid", claim.uid}, {"error", error}});
    if constexpr (std::is_same_v<Result, PrepareResult>) {
      batch.rejected[claim.uid].error = std::move(error);
    } else {
      batch.rejected[claim.uid] = std::move(error);
    }
  }
  return batch;
}

std::string& ErrorOf(PrepareResult& result) { return result.error; }
std::string& ErrorOf(std::string& result) { return result; }

// Runs `call` (the handler) on the valid claims and completes its answer into exactly one entry
// per requested UID.
template <typename Result, typename Call>
std::map<std::string, Result> Dispatch(const std::vector<ClaimRef>& claims, absl::string_view api,
                                       absl::string_view rpc, Call call) {
  ClaimBatch<Result> batch = Split<Result>(claims, api, rpc);
  std::map<std::string, Result> answer;
  if (!batch.valid.empty()) {
    try {
      answer = call(batch.valid);
    } catch (const std::exception& e) {
      answer.clear();
      for (const ClaimRef& claim : batch.valid) {
        ErrorOf(answer[claim.uid]) = absl::StrCat("internal error: ", e.what());
      }
    } catch (...) {
      answer.clear();
      for (const ClaimRef& claim : batch.valid) {
        ErrorOf(answer[claim.uid]) = "internal error: unknown exception";
      }
    }
  }
  std::map<std::string, Result> out = std::move(batch.rejected);
  for (const ClaimRef& claim : batch.valid) {
    auto it = answer.find(claim.uid);
    if (it == answer.end()) {
      DLOG(kError, "plugin", "claim handler returned no result for a claim",
           {{"api", api}, {"rpc", rpc}, {"uid", claim.uid}});
      ErrorOf(out[claim.uid]) = "driver returned no result for this claim";
      continue;
    }
    out[claim.uid] = std::move(it->second);
    answer.erase(it);
  }
  for (const auto& [uid, unused] : answer) {
    // An entry for a UID the kubelet did not send fails its whole call: drop it.
    DLOG(kError, "plugin", "claim handler returned a result for a claim not requested",
         {{"api", api}, {"rpc", rpc}, {"uid", uid}});
  }
  return out;
}

template <typename ClaimList>
std::vector<ClaimRef> ToClaimRefs(const ClaimList& claims) {
  std::vector<ClaimRef> refs;
  refs.reserve(claims.size());
  for (const auto& claim : claims) {
    refs.push_back(
        ClaimRef{.namespace_name = claim.namespace_(), .uid = claim.uid(), .name = claim.name()});
  }
  return refs;
}

void FillDevice(const PreparedDevice& device, dra_v1::Device& out) {
  out.mutable_request_names()->Add(device.request_names.begin(), device.request_names.end());
  out.set_pool_name(device.pool_name);
  out.set_device_name(device.device_name);
  out.mutable_cdi_device_ids()->Add(device.cdi_device_ids.begin(), device.cdi_device_ids.end());
  if (device.share_id.has_value()) {
    out.set_share_id(*device.share_id);
  }
}

void FillDevice(const PreparedDevice& device, dra_v1beta1::Device& out) {
  out.mutable_request_names()->Add(device.request_names.begin(), device.request_names.end());
  out.set_pool_name(device.pool_name);
  out.set_device_name(device.device_name);
  out.mutable_cdi_device_ids()->Add(device.cdi_device_ids.begin(), device.cdi_device_ids.end());
}

int CountErrors(const std::map<std::string, PrepareResult>& results) {
  int n = 0;
  for (const auto& [uid, result] : results) {
    n += result.error.empty() ? 0 : 1;
  }
  return n;
}

int CountErrors(const std::map<std::string, std::string>& results) {
  int n = 0;
  for (const auto& [uid, error] : results) {
    n += error.empty() ? 0 : 1;
  }
  return n;
}

// The server span and the call counter of one non-empty kubelet call.
class CallScope {
 public:
  CallScope(const CallTelemetry& telemetry, prepare::Operation operation, KubeletApi api,
            const std::vector<ClaimRef>& claims)
      : telemetry_(telemetry), operation_(operation), api_(api) {
    telemetry::StartSpanOptions options;
    options.kind = telemetry::SpanKind::kServer;
    const std::string method = operation == prepare::Operation::kPrepare ? "NodePrepareResources"
                                                                         : "NodeUnprepareResources";
    span_ = telemetry_.tracer.StartSpan(method, options);
    span_->SetAttribute("rpc.system", std::string("grpc"));
    span_->SetAttribute("rpc.service",
                        absl::StrCat("k8s.io.kubelet.pkg.apis.dra.", ToString(api), ".DRAPlugin"));
    span_->SetAttribute("rpc.method", method);
    span_->SetAttribute("dra.claims", static_cast<int64_t>(claims.size()));
    // Built only for a recording span: with tracing off this would hash every claim UID and
    // copy its strings on each kubelet call for nothing.
    if (span_->IsRecording()) {
      for (const ClaimRef& claim : claims) {
        // The claim's own span lives in its lifecycle trace; this event says which one.
        span_->AddEvent("claim",
                        {{"k8s.resourceclaim.uid", claim.uid},
                         {"k8s.namespace.name", claim.namespace_name},
                         {"k8s.resourceclaim.name", claim.name},
                         {"claim.trace_id", telemetry::TraceIdFromClaimUid(claim.uid).ToHex()}});
      }
    }
  }

  void Done(int errors) {
    span_->SetAttribute("dra.claim_errors", static_cast<int64_t>(errors));
    if (errors > 0) {
      span_->SetStatus(telemetry::StatusCode::kError, absl::StrCat(errors, " claims failed"));
    } else {
      span_->SetStatus(telemetry::StatusCode::kOk);
    }
    span_->End();
    telemetry_.metrics.Record(operation_, api_, errors == 0);
  }

  // What the claims' spans link to.
  KubeletCall call() const { return KubeletCall{.span = span_->context()}; }

 private:
  const CallTelemetry& telemetry_;
  prepare::Operation operation_;
  KubeletApi api_;
  telemetry::SpanPtr span_;
};

template <typename Request, typename Response>
grpc::Status Prepare(ClaimHandler& handler, const CallTelemetry& telemetry, KubeletApi api,
                     const Request& request, Response& response) {
  if (request.claims().empty()) {
    return grpc::Status::OK;  // liveness probe: answer at once
  }
  const std::vector<ClaimRef> refs = ToClaimRefs(request.claims());
  CallScope call(telemetry, prepare::Operation::kPrepare, api, refs);
  std::map<std::string, PrepareResult> results =
      PrepareClaims(handler, refs, ToString(api), call.call());
  auto& claims = *response.mutable_claims();
  for (const auto& [uid, result] : results) {
    auto& entry = claims[uid];
    if (!result.error.empty()) {
      entry.set_error(result.error);  // no devices with an error
      continue;
    }
    for (const PreparedDevice& device : result.devices) {
      FillDevice(device, *entry.add_devices());
    }
  }
  const int errors = CountErrors(results);
  call.Done(errors);
  DLOG(kDebug, "plugin", "NodePrepareResources",
       {{"api", ToString(api)}, {"claims", results.size()}, {"errors", errors}});
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::Status Unprepare(ClaimHandler& handler, const CallTelemetry& telemetry, KubeletApi api,
                       const Request& request, Response& response) {
  if (request.claims().empty()) {
    return grpc::Status::OK;
  }
  const std::vector<ClaimRef> refs = ToClaimRefs(request.claims());
  CallScope call(telemetry, prepare::Operation::kUnprepare, api, refs);
  std::map<std::string, std::string> results =
      UnprepareClaims(handler, refs, ToString(api), call.call());
  auto& claims = *response.mutable_claims();
  for (const auto& [uid, error] : results) {
    claims[uid].set_error(error);  // every claim appears, even with an empty entry
  }
  const int errors = CountErrors(results);
  call.Done(errors);
  DLOG(kDebug, "plugin", "NodeUnprepareResources",
       {{"api", ToString(api)}, {"claims", results.size()}, {"errors", errors}});
  return grpc::Status::OK;
}

}  // namespace

std::map<std::string, PrepareResult> PrepareClaims(ClaimHandler& handler,
                                                   const std::vector<ClaimRef>& claims,
                                                   absl::string_view api, const KubeletCall& call) {
  return Dispatch<PrepareResult>(
      claims, api, "NodePrepareResources",
      [&](const std::vector<ClaimRef>& valid) { return handler.Prepare(valid, call); });
}

std::map<std::string, std::string> UnprepareClaims(ClaimHandler& handler,
                                                   const std::vector<ClaimRef>& claims,
                                                   absl::string_view api, const KubeletCall& call) {
  return Dispatch<std::string>(
      claims, api, "NodeUnprepareResources",
      [&](const std::vector<ClaimRef>& valid) { return handler.Unprepare(valid, call); });
}

grpc::Status DraServiceV1::NodePrepareResources(grpc::ServerContext* /*context*/,
                                                const dra_v1::NodePrepareResourcesRequest* request,
                                                dra_v1::NodePrepareResourcesResponse* response) {
  return Prepare(handler_, telemetry_, KubeletApi::kV1, *request, *response);
}

grpc::Status DraServiceV1::NodeUnprepareResources(
    grpc::ServerContext* /*context*/, const dra_v1::NodeUnprepareResourcesRequest* request,
    dra_v1::NodeUnprepareResourcesResponse* response) {
  return Unprepare(handler_, telemetry_, KubeletApi::kV1, *request, *response);
}

grpc::Status DraServiceV1beta1::NodePrepareResources(
    grpc::ServerContext* /*context*/, const dra_v1beta1::NodePrepareResourcesRequest* request,
    dra_v1beta1::NodePrepareResourcesResponse* response) {
  return Prepare(handler_, telemetry_, KubeletApi::kV1beta1, *request, *response);
}

grpc::Status DraServiceV1beta1::NodeUnprepareResources(
    grpc::ServerContext* /*context*/, const dra_v1beta1::NodeUnprepareResourcesRequest* request,
    dra_v1beta1::NodeUnprepareResourcesResponse* response) {
  return Unprepare(handler_, telemetry_, KubeletApi::kV1beta1, *request, *response);
}

}  // namespace dralens::driver::plugin
