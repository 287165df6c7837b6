// NodeDriver: the node role's components wired together, discovery → slices → kubelet plugin.
//
// `dralens node` runs one; `dralens demo` runs one per simulated node, in the same process.
//
// Start, in this order (each step's failure stops the start and is returned, annotated):
//   1. discover the GPUs through the device source;
//   2. remove the temp files of interrupted writes in the plugin directory and the CDI root
//      (driver/prepare/temp_cleanup.h), open the checkpoint and the CDI root, restore prepared
//      claims (a claim left PrepareStarted by a crash is rolled back on its next prepare);
//   3. publish the ResourceSlices once, synchronously when the API server answers (a failure
//      here is logged and retried by the publisher's loop with backoff: the kubelet plugin must
//      still come up, or the kubelet could not unprepare claims of running pods);
//   4. watch this node's slices of this driver: a slice deleted (the kubelet wipes them when it
//      starts), edited or added by someone else makes the publisher converge at once;
//   5. check the prepared claims for orphans, at once and then periodically;
//   6. serve dra.sock, then the registration socket (the kubelet registers us as soon as that
//      one appears, so it comes last). Every registration by the kubelet asks the publisher for
//      a pass too, as a restarted kubelet may have wiped the slices.
// Stop reverses it: the registration socket goes first, then dra.sock (in-flight calls get a
// grace period), then the orphan checks, the slice watch and the publisher loop. Slices stay on the
// server: the kubelet wipes them 30 s after the plugin disconnects, and a restarting plugin
// republishes at once.
//
// Ready() is what /readyz reports: the kubelet acknowledged the registration and the current
// inventory is on the API server, with no drift seen since the last pass.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "driver/discovery/device_source.h"
#include "driver/health/health_service.h"
#include "driver/health/monitor.h"
#include "driver/plugin/call_telemetry.h"
#include "driver/plugin/plugin_server.h"
#include "driver/prepare/cdi.h"
#include "driver/prepare/checkpoint.h"
#include "driver/prepare/orphan_detector.h"
#include "driver/prepare/preparation.h"
#include "driver/sharing/mps.h"
#include "driver/slices/slice_publisher.h"
#include "driver/usage/usage_sampler.h"
#include "exporter/node/node_collectors.h"
#include "prometheus/registry.h"
#include "src/common/clock.h"
#include "src/k8s/client.h"
#include "src/k8s/informer.h"
#include "src/telemetry/exemplar.h"
#include "src/telemetry/tracing/tracer.h"
#include "src/telemetry/tracing/tracer_impl.h"

namespace dralens::app {

struct NodeDriverOptions {
  std::string node_name;
  std::string driver_name = "gpu.dralens.dev";
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string plugins_dir = "/var/lib/kubelet/plugins";
  std::string cdi_root = "/var/run/cdi";
  driver::discovery::DeviceSourceOptions device_source;
  // The running kernel's boot id file; tests point it elsewhere to simulate a reboot.
  std::string boot_id_path = driver::prepare::kDefaultBootIdPath;
  // Publish device health as ResourceSlice taints (needs the DRADeviceTaints feature gate on
  // the API server, beta from 1.36). The DRAResourceHealth stream is served either way.
  bool device_taints = false;
  // Dynamic MIG: publish every MIG profile x placement of MIG-capable GPUs as partitionable
  // devices and create the instances on prepare. `api_minor` (the API server's minor version)
  // picks the slice layout: counters and devices together before 1.35, split from 1.35.
  bool dynamic_mig = false;
  int api_minor = 34;
  // Publish full GPUs for consumable capacity (allowMultipleAllocations with a memory request
  // policy; needs the DRAConsumableCapacity feature gate).
  bool consumable_capacity = false;
  // Orphaned prepared claims (driver/prepare/orphan_detector.h): how often to check, and after
  // how long an orphan is unprepared (nullopt: never).
  absl::Duration orphan_check_interval = absl::Minutes(1);
  std::optional<absl::Duration> unprepare_orphans_after;
  // Utilisation sampling (driver/usage): how often (zero: never), and below which utilisation
  // (0..1) a prepared claim's devices count as idle.
  absl::Duration utilization_interval = absl::Seconds(10);
  double idle_threshold = 0.05;
  // Telemetry sinks; not owned, must outlive the driver. A null registry (or exemplar store)
  // records into a private one nobody scrapes; a null tracer records no spans.
  prometheus::Registry* registry = nullptr;
  telemetry::ExemplarStore* exemplars = nullptr;
  telemetry::Tracer* tracer = nullptr;
};

class NodeDriver {
 public:
  // `client` and `clock` are not owned and must outlive the driver.
  static absl::StatusOr<std::unique_ptr<NodeDriver>> Start(NodeDriverOptions options,
                                                           k8s::KubeClient& client,
                                                           common::Clock& clock);
  ~NodeDriver();  // Stop()
  NodeDriver(const NodeDriver&) = delete;
  NodeDriver& operator=(const NodeDriver&) = delete;

  // Idempotent.
  void Stop();

  // OK when registered with the kubelet and the slices are published; otherwise what is missing.
  absl::Status Ready() const;

  const std::string& registration_socket_path() const;
  const std::string& dra_socket_path() const;
  size_t device_count() const { return devices_; }
  // Where the GPUs come from. The demo reaches through it to inject faults into a simulated
  // source (SimulatedDeviceSource::InjectXid), which then reach the health monitor, the slices'
  // taints and the metrics as a real Xid would. Valid after Start() until destruction.
  driver::discovery::DeviceSource& device_source() { return *source_; }
  // Device health, fed by the device source's events; tests may Apply() events directly.
  driver::health::HealthMonitor& health() { return *health_; }
  // What /debug/claims shows: see ClaimPreparer::DebugState.
  nlohmann::json DebugClaims() const;
  // One slice convergence pass now, as the publisher's loop runs it; for tests that must know
  // what the loop would publish without waiting for it.
  absl::StatusOr<driver::slices::SyncResult> SyncSlicesForTest() { return publisher_->Sync(); }
  // The claim preparation (ledger, preparer); valid after Start() until destruction.
  driver::prepare::Preparation& preparation() { return *preparation_; }

 private:
  NodeDriver(NodeDriverOptions options, k8s::KubeClient& client, common::Clock& clock);
  absl::Status StartAll();
  // After a lost checkpoint (set aside as unreadable, or gone), claims prepared before may still
  // run: their CDI specs say so. With dynamic MIG their instances cannot be told from orphans,
  // and reclaiming them would take GPUs from running pods, so the node refuses to start
  // (FailedPrecondition, with the remedy); without it, the node starts, logs them, and the
  // kubelet's unprepare removes their specs.
  absl::Status CheckNoClaimWasLost(const driver::prepare::LoadedCheckpoint& loaded) const;

  const NodeDriverOptions options_;
  k8s::KubeClient& client_;
  common::Clock& clock_;
  size_t devices_ = 0;
  driver::discovery::DeviceSourcePtr source_;
  // Declared after the source and before the plugin: destroyed plugin first, then the health
  // services, then the monitor, then the source it watches.
  std::unique_ptr<driver::health::HealthMonitor> health_;
  std::unique_ptr<driver::health::HealthServices> health_services_;
  // The telemetry sinks in use: the options' or private ones.
  std::shared_ptr<prometheus::Registry> own_registry_;
  std::unique_ptr<telemetry::ExemplarStore> own_exemplars_;
  telemetry::NoopTracer noop_tracer_;
  prometheus::Registry* registry_ = nullptr;
  telemetry::ExemplarStore* exemplars_ = nullptr;
  telemetry::Tracer* tracer_ = nullptr;
  std::unique_ptr<exporter::NodeCollectors> collectors_;
  std::unique_ptr<driver::plugin::KubeletCallMetrics> call_metrics_;
  std::unique_ptr<driver::slices::SliceMetrics> slice_metrics_;
  std::unique_ptr<driver::prepare::FileCheckpointStore> checkpoint_;
  std::unique_ptr<driver::prepare::FileCdiWriter> cdi_;
  std::unique_ptr<driver::sharing::MpsControl> mps_;
  std::unique_ptr<driver::prepare::Preparation> preparation_;
  std::unique_ptr<driver::slices::SlicePublisher> publisher_;
  std::unique_ptr<k8s::Informer> slice_watch_;
  std::unique_ptr<driver::prepare::OrphanDetector> orphans_;
  std::unique_ptr<driver::usage::UsageSampler> usage_;
  driver::plugin::PluginServerPtr plugin_;
};

}  // namespace dralens::app
