// QueuedDraServiceV1 / QueuedDraServiceV1beta1: the DRAPlugin services registered on dra.sock.
//
// gRPC's synchronous server starts a thread for every call in flight, so a burst of kubelet
// calls (1,000 pods starting at once) costs a thread stack and a malloc arena each. These are
// gRPC callback services instead: each call is queued on a fixed WorkQueue, whose workers run
// the synchronous DraServiceV1/V1beta1 logic and finish the call. The thread count stays fixed
// whatever the load; the surplus waits in the queue (the kubelet serialises the calls of one
// claim anyway, so nothing is gained by running more at once than the checkpoint can commit).
//
// A call that arrives while the node is stopping is answered UNAVAILABLE. A call the kubelet
// cancels still runs to the end (prepare and unprepare are idempotent and the kubelet retries).
#pragma once

#include "driver/plugin/dra_service.h"
#include "src/common/work_queue.h"

namespace dralens::driver::plugin {

class QueuedDraServiceV1 final : public dra_v1::DRAPlugin::CallbackService {
 public:
  // Neither is owned; both must outlive the service.
  QueuedDraServiceV1(DraServiceV1& logic, common::WorkQueue& workers)
      : logic_(logic), workers_(workers) {}

  grpc::ServerUnaryReactor* NodePrepareResources(
      grpc::CallbackServerContext* context, const dra_v1::NodePrepareResourcesRequest* request,
      dra_v1::NodePrepareResourcesResponse* response) override;
  grpc::ServerUnaryReactor* NodeUnprepareResources(
      grpc::CallbackServerContext* context, const dra_v1::NodeUnprepareResourcesRequest* request,
      dra_v1::NodeUnprepareResourcesResponse* response) override;

 private:
  DraServiceV1& logic_;
  common::WorkQueue& workers_;
};

class QueuedDraServiceV1beta1 final : public dra_v1beta1::DRAPlugin::CallbackService {
 public:
  QueuedDraServiceV1beta1(DraServiceV1beta1& logic, common::WorkQueue& workers)
      : logic_(logic), workers_(workers) {}

  grpc::ServerUnaryReactor* NodePrepareResources(
      grpc::CallbackServerContext* context, const dra_v1beta1::NodePrepareResourcesRequest* request,
      dra_v1beta1::NodePrepareResourcesResponse* response) override;
  grpc::ServerUnaryReactor* NodeUnprepareResources(
      grpc::CallbackServerContext* context,
      const dra_v1beta1::NodeUnprepareResourcesRequest* request,
      dra_v1beta1::NodeUnprepareResourcesResponse* response) override;

 private:
  DraServiceV1beta1& logic_;
  common::WorkQueue& workers_;
};

}  // namespace dralens::driver::plugin
