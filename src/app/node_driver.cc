#include "src/app/node_driver.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/prepare/cdi.h"
#include "driver/prepare/temp_cleanup.h"
#include "src/common/log.h"
#include "src/common/status.h"

namespace dralens::app {
namespace {

constexpr char kComponent[] = "node";

}  // namespace

absl::StatusOr<std::unique_ptr<NodeDriver>> NodeDriver::Start(NodeDriverOptions options,
                                                              k8s::KubeClient& client,
                                                              common::Clock& clock) {
  std::unique_ptr<NodeDriver> driver(new NodeDriver(std::move(options), client, clock));
  absl::Status started = driver->StartAll();
  if (!started.ok()) {
    driver->Stop();
    return started;
  }
  return driver;
}

NodeDriver::NodeDriver(NodeDriverOptions options, k8s::KubeClient& client, common::Clock& clock)
    : options_(std::move(options)), client_(client), clock_(clock) {}

NodeDriver::~NodeDriver() { Stop(); }

absl::Status NodeDriver::StartAll() {
  const std::string& node = options_.node_name;

  registry_ = options_.registry;
  if (registry_ == nullptr) {
    own_registry_ = std::make_shared<prometheus::Registry>();
    registry_ = own_registry_.get();
  }
  driver::discovery::DeviceSourceOptions source_options = options_.device_source;
  source_options.node_name = node;
  source_options.registry = registry_;
  ASSIGN_OR_RETURN(source_, driver::discovery::MakeDeviceSource(source_options));
  absl::StatusOr<model::Inventory> inventory = source_->Discover();
  RETURN_IF_ERROR_CTX(inventory.status(),
                      absl::StrCat("discover GPUs (", source_options.kind, ")"));
  devices_ = inventory->gpus().size() + inventory->mig_devices().size();
  DLOG(kInfo, kComponent, "discovered devices",
       {{"source", source_options.kind},
        {"gpus", inventory->gpus().size()},
        {"mig_devices", inventory->mig_devices().size()}});

  exemplars_ = options_.exemplars;
  if (exemplars_ == nullptr) {
    own_exemplars_ = std::make_unique<telemetry::ExemplarStore>(clock_);
    exemplars_ = own_exemplars_.get();
  }
  tracer_ = options_.tracer != nullptr ? options_.tracer : &noop_tracer_;
  collectors_ = std::make_unique<exporter::NodeCollectors>(
      *registry_, exporter::NodeCollectorsOptions{.idle_threshold = options_.idle_threshold});
  call_metrics_ = std::make_unique<driver::plugin::KubeletCallMetrics>(
      driver::plugin::KubeletCallMetrics::Create(*registry_));
  slice_metrics_ = std::make_unique<driver::slices::SliceMetrics>(*registry_);

  driver::health::HealthMonitorOptions health_options;
  health_options.pool_name = node;
  health_options.dynamic_mig = options_.dynamic_mig;
  health_ = std::make_unique<driver::health::HealthMonitor>(health_options, clock_);
  health_->SetInventory(*inventory);
  health_->Start(*source_);
  health_services_ = std::make_unique<driver::health::HealthServices>(*health_, clock_);

  // Before anything writes there: what a kill during an atomic write left behind.
  driver::prepare::RemoveStaleTempFiles(
      absl::StrCat(options_.plugins_dir, "/", options_.driver_name), options_.cdi_root, *registry_);

  absl::StatusOr<std::string> boot_id = driver::prepare::ReadBootId(options_.boot_id_path);
  RETURN_IF_ERROR_CTX(boot_id.status(), "read the node boot id");
  checkpoint_ = std::make_unique<driver::prepare::FileCheckpointStore>(
      driver::prepare::CheckpointPath(options_.plugins_dir, options_.driver_name), *boot_id,
      clock_);
  cdi_ = std::make_unique<driver::prepare::FileCdiWriter>(options_.cdi_root);
  driver::prepare::PreparationOptions preparation_options;
  preparation_options.preparer.driver_name = options_.driver_name;
  preparation_options.preparer.pool_name = node;
  if (source_options.kind == "nvml") {
    preparation_options.preparer.cdi_host = driver::prepare::ReadCdiHostInfo();
  }
  preparation_options.preparer.dynamic_mig = options_.dynamic_mig;
  // Simulated GPUs get a simulated MPS control; on real GPUs no daemon manager is built in yet,
  // so MPS claims fail with a clear sharing_error instead of running without a daemon.
  if (source_options.kind == "simulated") {
    mps_ = std::make_unique<driver::sharing::SimulatedMpsControl>();
  } else {
    mps_ = std::make_unique<driver::sharing::UnavailableMpsControl>();
  }
  preparation_options.mps_root =
      absl::StrCat(options_.plugins_dir, "/", options_.driver_name, "/mps");
  ASSIGN_OR_RETURN(preparation_,
                   driver::prepare::Preparation::Create(
                       preparation_options, client_, *checkpoint_, *cdi_, *source_, *mps_,
                       driver::prepare::PreparationSinks{.registry = *registry_,
                                                         .exemplars = *exemplars_,
                                                         .tracer = *tracer_,
                                                         .clock = clock_,
                                                         .view = *collectors_},
                       *inventory));
  const driver::prepare::LoadedCheckpoint& loaded = preparation_->load_result();
  DLOG(kInfo, kComponent, "checkpoint opened",
       {{"origin", driver::prepare::ToString(loaded.origin)},
        {"claims", loaded.checkpoint.claims.size()}});

  RETURN_IF_ERROR(CheckNoClaimWasLost(loaded));
  {
    // Unprepare removes the CDI spec before the checkpoint entry, so that a crash in between
    // leaks no spec; a kill there leaves a PrepareCompleted claim without its spec. Until the
    // kubelet's retry the node would report it as prepared and answer a prepare of it with a
    // CDI device that is gone: finish that unprepare now, as the retry would.
    std::vector<driver::ClaimRef> interrupted;
    for (const auto& [uid, claim] : loaded.checkpoint.claims) {
      std::error_code ec;
      if (claim.state == driver::prepare::ClaimState::kPrepareCompleted &&
          !claim.cdi_spec_file.empty() &&
          !std::filesystem::exists(std::filesystem::path(options_.cdi_root) / claim.cdi_spec_file,
                                   ec) &&
          !ec) {
        interrupted.push_back(
            {.namespace_name = claim.namespace_name, .uid = uid, .name = claim.name});
      }
    }
    if (!interrupted.empty()) {
      for (const auto& [uid, error] :
           preparation_->preparer().Unprepare(interrupted, driver::KubeletCall{})) {
        if (error.empty()) {
          DLOG(kWarn, kComponent,
               "finished the unprepare of a claim whose CDI spec was already removed",
               {{"uid", uid}});
        } else {
          DLOG(kError, kComponent,
               "could not finish the unprepare of a claim whose CDI spec was already removed",
               {{"uid", uid}, {"error", error}});
        }
      }
    }
  }

  if (options_.dynamic_mig) {
    // Instances no prepared claim owns were left by a crash or made by hand: the scheduler
    // believes those slices free, so they go before anything is published.
    absl::StatusOr<int> reclaimed = preparation_->preparer().ReclaimOrphanMigInstances(*inventory);
    RETURN_IF_ERROR_CTX(reclaimed.status(), "dynamic MIG");
    if (*reclaimed > 0) {
      inventory = source_->Discover();
      RETURN_IF_ERROR_CTX(inventory.status(), "discover GPUs after reclaiming MIG instances");
      health_->SetInventory(*inventory);
    }
  }

  driver::slices::SlicePublisherOptions publisher_options;
  publisher_options.dynamic_mig = options_.dynamic_mig;
  publisher_options.api_minor = options_.api_minor;
  publisher_options.consumable_capacity = options_.consumable_capacity;
  publisher_options.node_name = node;
  publisher_options.driver_name = options_.driver_name;
  publisher_options.metrics = slice_metrics_.get();
  publisher_ = std::make_unique<driver::slices::SlicePublisher>(client_, clock_, publisher_options);
  auto unhealthy = [this] {
    std::set<std::string> devices;
    for (const driver::health::DeviceHealthState& d : health_->Snapshot()) {
      if (d.health == driver::health::DeviceHealthStatus::kUnhealthy) {
        devices.insert(d.device);
      }
    }
    preparation_->view().SetUnhealthy(std::move(devices));
  };
  unhealthy();
  health_->OnChange(unhealthy);
  publisher_->Publish(*inventory);
  if (options_.device_taints) {
    publisher_->SetTaints(health_->Taints());
    health_->OnChange([this] { publisher_->SetTaints(health_->Taints()); });
  }
  // The publisher logs what it wrote; a failure here only delays readiness.
  absl::StatusOr<driver::slices::SyncResult> synced = publisher_->Sync();
  if (!synced.ok()) {
    DLOG(kWarn, kComponent, "publishing slices failed; retrying in the background",
         {{"error", synced.status().message()}});
  }
  publisher_->Run();

  // Drift of the published pool (the kubelet wipes the node's slices when it starts; anyone may
  // edit or delete them) reaches the publisher through a watch on the same selector.
  k8s::InformerOptions watch_options;
  watch_options.field_selector =
      absl::StrCat("spec.nodeName=", node, ",spec.driver=", options_.driver_name);
  slice_watch_ = std::make_unique<k8s::Informer>(client_, k8s::kResourceSlices, watch_options);
  slice_watch_->SetHandlers({
      .on_add = [this](const nlohmann::json& slice) { publisher_->Observe("ADDED", slice); },
      .on_update = [this](const nlohmann::json& /*old_slice*/,
                          const nlohmann::json& slice) { publisher_->Observe("MODIFIED", slice); },
      .on_delete = [this](const nlohmann::json& slice) { publisher_->Observe("DELETED", slice); },
  });
  slice_watch_->Start();

  driver::prepare::OrphanDetectorOptions orphan_options;
  orphan_options.driver_name = options_.driver_name;
  orphan_options.pool_name = node;
  orphan_options.interval = options_.orphan_check_interval;
  orphan_options.unprepare_after = options_.unprepare_orphans_after;
  orphans_ = std::make_unique<driver::prepare::OrphanDetector>(
      orphan_options, client_, preparation_->ledger(), preparation_->preparer(), clock_,
      *registry_);
  orphans_->Run();

  if (options_.utilization_interval > absl::ZeroDuration()) {
    usage_ = std::make_unique<driver::usage::UsageSampler>(
        *source_, *collectors_, clock_, *registry_,
        driver::usage::UsageSamplerOptions{.interval = options_.utilization_interval});
    usage_->Start();
  }

  driver::plugin::PluginServerOptions plugin_options;
  plugin_options.driver_name = options_.driver_name;
  plugin_options.registry_dir = options_.registry_dir;
  plugin_options.plugins_dir = options_.plugins_dir;
  plugin_options.health = health_services_.get();
  // A restarted kubelet wipes the node's slices before it registers the plugin again: look.
  plugin_options.on_registered = [this] { publisher_->Resync(); };
  ASSIGN_OR_RETURN(
      plugin_, driver::plugin::PluginServer::Start(
                   plugin_options, preparation_->preparer(),
                   driver::plugin::CallTelemetry{.metrics = *call_metrics_, .tracer = *tracer_}));
  return absl::OkStatus();
}

absl::Status NodeDriver::CheckNoClaimWasLost(
    const driver::prepare::LoadedCheckpoint& loaded) const {
  using Origin = driver::prepare::LoadedCheckpoint::Origin;
  if (loaded.origin != Origin::kRebuilt && loaded.origin != Origin::kFresh) {
    return absl::OkStatus();  // loaded, or dropped after a reboot (which took the claims along)
  }
  const std::vector<std::string> uids = driver::prepare::ClaimUidsWithSpecs(options_.cdi_root);
  if (uids.empty()) {
    return absl::OkStatus();
  }
  const std::string lost = loaded.origin == Origin::kRebuilt
                               ? absl::StrCat("the checkpoint was unreadable (", loaded.reason,
                                              "; kept as ", loaded.quarantined_path, ")")
                               : std::string("there is no checkpoint");
  const std::vector<std::string> shown(uids.begin(),
                                       uids.begin() + std::min<size_t>(5, uids.size()));
  const std::string which = absl::StrCat(
      uids.size(), " claims prepared on this node still have CDI specs under ", options_.cdi_root,
      " (", absl::StrJoin(shown, ", "), uids.size() > shown.size() ? ", ..." : "", ")");
  if (options_.dynamic_mig) {
    return absl::FailedPreconditionError(absl::StrCat(
        lost, ", but ", which,
        ": with --dynamic-mig their MIG instances cannot be told from orphans, and reclaiming "
        "them would take GPUs from running pods. Restore the checkpoint, or delete those specs "
        "once no pod on this node uses the claims (docs/node.md, \"Checkpoint lost\")"));
  }
  DLOG(kError, kComponent,
       "claims prepared before the checkpoint was lost; the kubelet's unprepare removes their "
       "specs",
       {{"lost", lost}, {"claims", which}});
  return absl::OkStatus();
}

void NodeDriver::Stop() {
  if (health_services_) {
    health_services_->Shutdown();  // ends open health streams so the plugin stops promptly
  }
  if (plugin_) {
    plugin_->Stop();
  }
  if (orphans_) {
    orphans_->Stop();
  }
  if (usage_) {
    usage_->Stop();
  }
  if (slice_watch_) {
    slice_watch_->Stop();
  }
  if (publisher_) {
    publisher_->Stop();
  }
  if (health_) {
    health_->Stop();
  }
  if (preparation_) {
    preparation_->Stop();
  }
}

absl::Status NodeDriver::Ready() const {
  if (!plugin_ || !publisher_) {
    return absl::UnavailableError("starting");
  }
  const driver::plugin::RegistrationState reg = plugin_->RegistrationStatus();
  if (!reg.notified) {
    return absl::UnavailableError("waiting for the kubelet to register the plugin");
  }
  if (!reg.registered) {
    return absl::UnavailableError(absl::StrCat("kubelet refused the registration: ", reg.error));
  }
  if (!publisher_->Published()) {
    absl::Status last = publisher_->LastError();
    return absl::UnavailableError(
        last.ok() ? "ResourceSlices not published yet"
                  : absl::StrCat("ResourceSlices not published: ", last.message()));
  }
  return absl::OkStatus();
}

nlohmann::json NodeDriver::DebugClaims() const {
  if (preparation_ == nullptr) {
    return {{"error", "starting"}};
  }
  return preparation_->preparer().DebugState();
}

const std::string& NodeDriver::registration_socket_path() const {
  return plugin_->registration_socket_path();
}

const std::string& NodeDriver::dra_socket_path() const { return plugin_->dra_socket_path(); }

}  // namespace dralens::app
