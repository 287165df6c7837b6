#include "driver/plugin/queued_dra_service.h"

#include <functional>
#include <utility>

#include "grpcpp/support/server_callback.h"

namespace dralens::driver::plugin {
namespace {

// Queues `run` and finishes the call with its status once a worker has run it.
grpc::ServerUnaryReactor* Enqueue(grpc::CallbackServerContext* context, common::WorkQueue& workers,
                                  std::function<grpc::Status()> run) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const bool queued = workers.Submit([reactor, run = std::move(run)] { reactor->Finish(run()); });
  if (!queued) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the DRA plugin is stopping"));
  }
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* QueuedDraServiceV1::NodePrepareResources(
    grpc::CallbackServerContext* context, const dra_v1::NodePrepareResourcesRequest* request,
    dra_v1::NodePrepareResourcesResponse* response) {
  return Enqueue(context, workers_, [this, request, response] {
    return logic_.NodePrepareResources(nullptr, request, response);
  });
}

grpc::ServerUnaryReactor* QueuedDraServiceV1::NodeUnprepareResources(
    grpc::CallbackServerContext* context, const dra_v1::NodeUnprepareResourcesRequest* request,
    dra_v1::NodeUnprepareResourcesResponse* response) {
  return Enqueue(context, workers_, [this, request, response] {
    return logic_.NodeUnprepareResources(nullptr, request, response);
  });
}

grpc::ServerUnaryReactor* QueuedDraServiceV1beta1::NodePrepareResources(
    grpc::CallbackServerContext* context, const dra_v1beta1::NodePrepareResourcesRequest* request,
    dra_v1beta1::NodePrepareResourcesResponse* response) {
  return Enqueue(context, workers_, [this, request, response] {
    return logic_.NodePrepareResources(nullptr, request, response);
  });
}

grpc::ServerUnaryReactor* QueuedDraServiceV1beta1::NodeUnprepareResources(
    grpc::CallbackServerContext* context, const dra_v1beta1::NodeUnprepareResourcesRequest* request,
    dra_v1beta1::NodeUnprepareResourcesResponse* response) {
  return Enqueue(context, workers_, [this, request, response] {
    return logic_.NodeUnprepareResources(nullptr, request, response);
  });
}

}  // namespace dralens::driver::plugin
