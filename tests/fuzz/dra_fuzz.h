// The body shared by the DRA service fuzz targets: the input is a serialized
// NodePrepareResourcesRequest / NodeUnprepareResourcesRequest (v1 or v1beta1), handed to the
// service over a scripted FakeClaimHandler. Claim names script the handler: a name starting
// with "omit" is left out of its answer, "err" fails, "throw" makes the whole call throw, and
// "extra" adds an answer for a UID nobody asked for. Whatever the request, the response must
// hold exactly one entry per distinct claim UID and the gRPC status must be OK.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "driver/plugin/dra_service.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"
#include "src/telemetry/tracing/sampler.h"
#include "src/telemetry/tracing/simple_span_processor.h"
#include "src/telemetry/tracing/tracer_impl.h"
#include "tests/driver/plugin/fake_claim_handler.h"
#include "tests/fuzz/fuzz_check.h"

namespace dralens::fuzz {

// Scripts `handler` from the claims' names; returns the distinct UIDs of the request.
template <typename Request>
std::set<std::string> Script(const Request& request, driver::plugin::FakeClaimHandler& handler) {
  std::set<std::string> uids;
  for (const auto& claim : request.claims()) {
    uids.insert(claim.uid());
    if (absl::StartsWith(claim.name(), "omit")) {
      handler.Omit(claim.uid());
    } else if (absl::StartsWith(claim.name(), "err")) {
      handler.SetError(claim.uid(), "scripted failure");
    } else if (absl::StartsWith(claim.name(), "throw")) {
      handler.Throw();
    } else if (absl::StartsWith(claim.name(), "extra")) {
      handler.AddUnrequested(claim.uid() + "-unrequested");
    }
  }
  return uids;
}

template <typename Response>
void CheckAnswers(const Response& response, const std::set<std::string>& uids) {
  FUZZ_CHECK(static_cast<size_t>(response.claims().size()) == uids.size(),
             "one answer per distinct claim UID");
  for (const auto& [uid, answer] : response.claims()) {
    FUZZ_CHECK(uids.contains(uid), "answers only for requested UIDs");
  }
}

// Runs one serialized request through `Service::*method`, with metrics and a tracer attached
// so that their per-claim code runs too.
template <typename Service, typename Request, typename Response>
void FuzzCall(const uint8_t* data, size_t size,
              grpc::Status (Service::*method)(grpc::ServerContext*, const Request*, Response*)) {
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) {
    return;
  }
  static prometheus::Registry* registry = new prometheus::Registry();
  static driver::plugin::KubeletCallMetrics* metrics =
      new driver::plugin::KubeletCallMetrics(driver::plugin::KubeletCallMetrics::Create(*registry));
  telemetry::TracingStats stats;
  telemetry::SimpleSpanProcessor processor(std::make_unique<telemetry::InMemorySpanExporter>(),
                                           stats);
  telemetry::TracerImpl tracer(processor, telemetry::MakeAlwaysOnSampler(), common::RealClock());
  driver::plugin::FakeClaimHandler handler;
  std::set<std::string> uids = Script(request, handler);
  Service service(handler, driver::plugin::CallTelemetry{.metrics = *metrics, .tracer = tracer});
  Response response;
  grpc::Status status = (service.*method)(nullptr, &request, &response);
  FUZZ_CHECK(status.ok(), "per-claim failures never become a gRPC error");
  CheckAnswers(response, uids);
}

}  // namespace dralens::fuzz
