#include "driver/slices/slice_publisher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/codec.h"
#include "src/telemetry/catalog.h"

namespace dralens::driver::slices {
namespace {

constexpr char kComponent[] = "slices";

// One slice on the server: its identity and, when it decoded, its content.
struct Existing {
  std::string name;
  std::string resource_version;
  std::optional<model::ResourceSlice> slice;
};

// The part of a slice we own and compare: spec, labels and owner references.
std::string ContentKey(const model::ResourceSlice& slice) {
  model::ResourceSlice owned;
  owned.metadata.labels = slice.metadata.labels;
  owned.metadata.owner_references = slice.metadata.owner_references;
  owned.spec = slice.spec;
  return model::Encode(owned).dump();
}

size_t CountDevices(const std::vector<model::ResourceSlice>& slices) {
  size_t n = 0;
  for (const model::ResourceSlice& slice : slices) {
    n += slice.spec.devices.size();
  }
  return n;
}

// Notes a slice as the server stored it after our write.
void RecordStored(const nlohmann::json& stored, std::map<std::string, std::string>* on_server) {
  const std::string name = stored.value("/metadata/name"_json_pointer, "");
  absl::StatusOr<model::ResourceSlice> decoded = model::Decode<model::ResourceSlice>(stored);
  // An answer we cannot read leaves the entry empty: any event about it then counts as drift
  // and one more pass reads the list.
  (*on_server)[name] = decoded.ok() ? ContentKey(*decoded) : "";
}

// Whether a pass that failed with `status` should start over from the list.
bool RestartsPass(const absl::Status& status) {
  return k8s::IsConflict(status) || k8s::IsNotFound(status);
}

}  // namespace

SlicePublisher::SlicePublisher(k8s::KubeClient& client, common::Clock& clock,
                               SlicePublisherOptions options)
    : client_(client), clock_(clock), options_(std::move(options)) {}

SlicePublisher::~SlicePublisher() { Stop(); }

void SlicePublisher::Publish(model::Inventory inventory) {
  absl::MutexLock lock(&mu_);
  inventory_ = std::move(inventory);
  ++inventory_seq_;
  want_sync_ = true;
}

void SlicePublisher::SetTaints(std::map<std::string, std::vector<model::DeviceTaint>> taints) {
  absl::MutexLock lock(&mu_);
  if (taints == taints_) {
    return;
  }
  taints_ = std::move(taints);
  ++inventory_seq_;
  want_sync_ = true;
}

void SlicePublisher::Resync() {
  absl::MutexLock lock(&mu_);
  want_sync_ = true;
}

absl::Status SlicePublisher::EnsureNodeUid() {
  if (!node_uid_.empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<nlohmann::json> node = client_.Get(k8s::kNodes, "", options_.node_name);
  if (!node.ok()) {
    return common::Annotate(node.status(), absl::StrCat("get node ", options_.node_name));
  }
  const nlohmann::json* uid = nullptr;
  if (node->contains("metadata") && (*node)["metadata"].is_object() &&
      (*node)["metadata"].contains("uid")) {
    uid = &(*node)["metadata"]["uid"];
  }
  if (uid == nullptr || !uid->is_string() || uid->get<std::string>().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("get node ", options_.node_name, ": the Node has no metadata.uid"));
  }
  node_uid_ = uid->get<std::string>();
  return absl::OkStatus();
}

SliceMetrics::SliceMetrics(prometheus::Registry& registry)
    : syncs_(telemetry::BuildCounter(registry, "dralens_slices_syncs_total")),
      drifts_(telemetry::BuildCounter(registry, "dralens_slices_drift_total")),
      duration_(telemetry::BuildHistogram(registry, "dralens_slices_sync_duration_seconds")
                    .Add({}, telemetry::DurationBuckets())),
      generation_(telemetry::BuildGauge(registry, "dralens_slices_pool_generation").Add({})),
      devices_(telemetry::BuildGauge(registry, "dralens_slices_published_devices").Add({})),
      slices_(telemetry::BuildGauge(registry, "dralens_slices_published").Add({})) {
  for (const char* result : {"unchanged", "changed", "error"}) {
    syncs_.Add({{"result", result}});
  }
  for (const char* kind : {"deleted", "modified", "added"}) {
    drifts_.Add({{"kind", kind}});
  }
}

void SliceMetrics::RecordDrift(absl::string_view kind) {
  drifts_.Add({{"kind", std::string(kind)}}).Increment();
}

void SliceMetrics::RecordSync(const absl::StatusOr<SyncResult>& result, absl::Duration duration) {
  duration_.Observe(absl::ToDoubleSeconds(duration));
  if (!result.ok()) {
    syncs_.Add({{"result", "error"}}).Increment();
    return;
  }
  syncs_.Add({{"result", result->changed() ? "changed" : "unchanged"}}).Increment();
  generation_.Set(static_cast<double>(result->generation));
  devices_.Set(static_cast<double>(result->devices));
  slices_.Set(static_cast<double>(result->slices));
}

absl::StatusOr<SyncResult> SlicePublisher::Sync() {
  absl::MutexLock sync_lock(&sync_mu_);
  const absl::Time started = clock_.Now();
  std::optional<model::Inventory> inventory;
  std::map<std::string, std::vector<model::DeviceTaint>> taints;
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    inventory = inventory_;
    taints = taints_;
    seq = inventory_seq_;
    ++sync_count_;
  }
  if (!inventory.has_value()) {
    return absl::FailedPreconditionError("publish slices: no inventory yet");
  }

  absl::StatusOr<SyncResult> result;
  std::map<std::string, std::string> on_server;
  if (absl::Status uid = EnsureNodeUid(); !uid.ok()) {
    result = uid;
  } else {
    for (int pass = 1;; ++pass) {
      on_server.clear();
      result = SyncPass(*inventory, taints, &on_server);
      if (result.ok() || pass >= options_.max_conflict_passes || !RestartsPass(result.status())) {
        break;
      }
      // Someone else wrote or deleted one of our slices between our list and our write: list
      // again and recompute instead of overwriting blindly.
      DLOG(kInfo, kComponent, "slice changed concurrently, starting over",
           {{"node", options_.node_name}, {"error", result.status().message()}});
    }
  }
  result = common::Annotate(std::move(result), "publish slices");
  if (options_.metrics != nullptr) {
    options_.metrics->RecordSync(result, clock_.Now() - started);
  }

  // What the server holds is known only after a pass that succeeded.
  if (result.ok()) {
    on_server_ = std::move(on_server);
  } else {
    on_server_.reset();
  }
  absl::MutexLock lock(&mu_);
  if (result.ok()) {
    last_success_ = clock_.Now();
    last_error_ = absl::OkStatus();
    in_sync_ = true;
    published_seq_ = std::max(published_seq_, seq);
    if (result->changed()) {
      DLOG(kInfo, kComponent, "slices published",
           {{"node", options_.node_name},
            {"driver", options_.driver_name},
            {"generation", result->generation},
            {"slices", result->slices},
            {"devices", result->devices},
            {"created", result->created},
            {"updated", result->updated},
            {"deleted", result->deleted}});
    }
  } else {
    last_error_ = result.status();
    DLOG(kWarn, kComponent, "slice publish failed",
         {{"node", options_.node_name}, {"error", result.status().ToString()}});
  }
  return result;
}

absl::StatusOr<SyncResult> SlicePublisher::SyncPass(
    const model::Inventory& inventory,
    const std::map<std::string, std::vector<model::DeviceTaint>>& taints,
    std::map<std::string, std::string>* on_server) {
  k8s::ListOptions list_options;
  list_options.field_selector =
      absl::StrCat("spec.nodeName=", options_.node_name, ",spec.driver=", options_.driver_name);
  ASSIGN_OR_RETURN(k8s::ListResult list,
                   common::Annotate(k8s::ListAll(client_, k8s::kResourceSlices, "", list_options),
                                    "list slices"));

  std::vector<Existing> existing;
  int64_t max_seen = 0;
  bool uniform = true;  // every slice decoded and all share one generation
  std::optional<int64_t> first_generation;
  for (const nlohmann::json& item : list.items) {
    Existing e;
    const nlohmann::json& md = item.value("metadata", nlohmann::json::object());
    e.name = md.value("name", "");
    e.resource_version = md.value("resourceVersion", "");
    absl::StatusOr<model::ResourceSlice> decoded = model::Decode<model::ResourceSlice>(item);
    if (decoded.ok()) {
      const int64_t generation = decoded->spec.pool.generation;
      max_seen = std::max(max_seen, generation);
      if (first_generation.has_value() && *first_generation != generation) {
        uniform = false;
      }
      first_generation = generation;
      e.slice = *std::move(decoded);
    } else {
      // Replace what we cannot read rather than fail forever.
      DLOG(kWarn, kComponent, "undecodable slice will be replaced",
           {{"slice", e.name}, {"error", decoded.status().message()}});
      uniform = false;
    }
    existing.push_back(std::move(e));
  }
  std::sort(existing.begin(), existing.end(),
            [](const Existing& a, const Existing& b) { return a.name < b.name; });

  SliceBuilder builder(
      {options_.node_name, node_uid_, options_.driver_name},
      {options_.dynamic_mig, options_.api_minor, max_seen, taints, options_.consumable_capacity});
  ASSIGN_OR_RETURN(std::vector<model::ResourceSlice> desired,
                   common::Annotate(builder.Build(inventory), "build slices"));

  SyncResult result;
  result.slices = desired.size();
  result.devices = CountDevices(desired);

  if (uniform && existing.size() == desired.size()) {
    std::vector<std::string> have;
    std::vector<std::string> want;
    for (const Existing& e : existing) {
      have.push_back(ContentKey(*e.slice));
    }
    for (const model::ResourceSlice& s : desired) {
      want.push_back(ContentKey(s));
    }
    std::sort(have.begin(), have.end());
    std::sort(want.begin(), want.end());
    if (have == want) {
      for (const Existing& e : existing) {
        (*on_server)[e.name] = ContentKey(*e.slice);
      }
      last_generation_ = std::max(last_generation_, max_seen);
      result.generation = max_seen;
      return result;
    }
  }

  // Any change rewrites the whole pool at a new generation. The generation never goes back,
  // even when the kubelet wiped every slice: consumers may still cache the old ones.
  const int64_t generation = std::max(max_seen, last_generation_) + 1;
  for (model::ResourceSlice& s : desired) {
    s.spec.pool.generation = generation;
  }
  result.generation = generation;

  // Updates and creates first, deletes last (see the header).
  const size_t paired = std::min(existing.size(), desired.size());
  for (size_t i = 0; i < paired; ++i) {
    const Existing& e = existing[i];
    model::ResourceSlice update = desired[i];
    if (e.slice.has_value()) {
      // Keep what others may have set (annotations, finalizers) and the server's fields.
      model::ObjectMeta md = e.slice->metadata;
      md.labels = update.metadata.labels;
      md.owner_references = update.metadata.owner_references;
      update.metadata = std::move(md);
    }
    update.metadata.name = e.name;
    update.metadata.resource_version = e.resource_version;
    absl::StatusOr<nlohmann::json> stored =
        client_.Update(k8s::kResourceSlices, "", model::Encode(update), "");
    if (!stored.ok()) {
      return common::Annotate(stored.status(), absl::StrCat("update slice ", e.name));
    }
    RecordStored(*stored, on_server);
    ++result.updated;
  }
  for (size_t i = paired; i < desired.size(); ++i) {
    absl::StatusOr<nlohmann::json> stored =
        client_.Create(k8s::kResourceSlices, "", model::Encode(desired[i]));
    if (!stored.ok()) {
      return common::Annotate(stored.status(), "create slice");
    }
    RecordStored(*stored, on_server);
    ++result.created;
  }
  last_generation_ = generation;
  for (size_t i = paired; i < existing.size(); ++i) {
    absl::Status deleted =
        client_.Delete(k8s::kResourceSlices, "", existing[i].name, k8s::DeleteOptions{});
    if (!deleted.ok() && !k8s::IsNotFound(deleted)) {
      return common::Annotate(deleted, absl::StrCat("delete slice ", existing[i].name));
    }
    ++result.deleted;
  }
  return result;
}

bool SlicePublisher::Observe(absl::string_view type, const nlohmann::json& object) {
  // Judge events against the outcome of a pass in progress, not against the one before it.
  absl::MutexLock sync_lock(&sync_mu_);
  if (!on_server_.has_value()) {
    return false;
  }
  std::map<std::string, std::string>& on_server = *on_server_;
  const std::string name = object.value("/metadata/name"_json_pointer, "");
  const auto known = on_server.find(name);
  const char* kind = nullptr;
  if (type == "DELETED") {
    if (known != on_server.end()) {
      kind = "deleted";
      on_server.erase(known);
    }
  } else if (type == "ADDED" || type == "MODIFIED") {
    absl::StatusOr<model::ResourceSlice> decoded = model::Decode<model::ResourceSlice>(object);
    const std::string key = decoded.ok() ? ContentKey(*decoded) : "";
    if (known == on_server.end()) {
      kind = "added";
    } else if (key.empty() || key != known->second) {
      kind = "modified";
    }
  }
  if (kind == nullptr) {
    return false;
  }
  if (options_.metrics != nullptr) {
    options_.metrics->RecordDrift(kind);
  }
  DLOG(kInfo, kComponent, "slice drift, converging",
       {{"node", options_.node_name}, {"slice", name}, {"drift", kind}});
  absl::MutexLock lock(&mu_);
  in_sync_ = false;
  want_sync_ = true;
  drift_pending_ = true;
  return true;
}

void SlicePublisher::Run() {
  absl::MutexLock run_lock(&run_mu_);
  if (thread_ != nullptr) {
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::make_unique<std::thread>([this] { Loop(); });
}

void SlicePublisher::Stop() {
  absl::MutexLock run_lock(&run_mu_);
  if (thread_ == nullptr) {
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_->join();
  thread_.reset();
}

void SlicePublisher::Loop() {
  absl::Duration backoff = options_.initial_backoff;
  bool retry_pending = false;
  absl::Time retry_at = absl::InfinitePast();
  auto resync_after = [this](absl::Time now) {
    return options_.resync_interval > absl::ZeroDuration() ? now + options_.resync_interval
                                                           : absl::InfiniteFuture();
  };
  absl::Time next_resync = resync_after(clock_.Now());
  absl::Duration repair_backoff = options_.initial_backoff;
  absl::Time last_repair = absl::InfinitePast();

  for (;;) {
    bool repair = false;
    {
      absl::MutexLock lock(&mu_);
      // A trigger wakes the loop at once unless a retry is pending: the backoff then holds
      // even for new inventories, so a failing server is not hammered.
      auto woken = [this, &retry_pending]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || (want_sync_ && !retry_pending);
      };
      for (;;) {
        if (stop_) {
          return;
        }
        const absl::Time now = clock_.Now();
        if (!retry_pending && want_sync_) {
          break;
        }
        const absl::Time due = retry_pending ? retry_at : next_resync;
        if (now >= due) {
          break;
        }
        mu_.AwaitWithTimeout(absl::Condition(&woken), std::min(due - now, options_.poll_interval));
      }
      want_sync_ = false;
      repair = drift_pending_;
      drift_pending_ = false;
      if (!inventory_.has_value()) {
        next_resync = resync_after(clock_.Now());
        retry_pending = false;
        continue;
      }
    }

    absl::StatusOr<SyncResult> result = Sync();
    const absl::Time now = clock_.Now();
    if (result.ok()) {
      retry_pending = false;
      backoff = options_.initial_backoff;
      next_resync = resync_after(now);
      if (repair && result->created + result->updated + result->deleted > 0) {
        // This pass undid someone else's change. Undoing the next one within the window
        // waits, longer each time, so two writers of one pool settle into a slow alternation.
        if (now - last_repair < options_.repair_window) {
          retry_pending = true;
          retry_at = now + repair_backoff;
          repair_backoff = std::min(repair_backoff * 2, options_.max_backoff);
          DLOG(kWarn, kComponent, "slices changed back again soon after a repair; holding the next",
               {{"node", options_.node_name},
                {"hold_ms", absl::ToInt64Milliseconds(retry_at - now)}});
        } else {
          repair_backoff = options_.initial_backoff;
        }
        last_repair = now;
      }
      continue;
    }
    absl::Duration delay = backoff;
    if (std::optional<absl::Duration> after = k8s::RetryAfter(result.status()); after.has_value()) {
      delay = std::max(delay, *after);
    }
    delay = std::min(delay, options_.max_backoff);
    retry_pending = true;
    retry_at = now + delay;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

std::optional<absl::Time> SlicePublisher::LastSuccess() const {
  absl::MutexLock lock(&mu_);
  return last_success_;
}

bool SlicePublisher::Published() const {
  absl::MutexLock lock(&mu_);
  return inventory_.has_value() && published_seq_ == inventory_seq_ && last_error_.ok() && in_sync_;
}

absl::Status SlicePublisher::LastError() const {
  absl::MutexLock lock(&mu_);
  return last_error_;
}

int64_t SlicePublisher::SyncCountForTest() const {
  absl::MutexLock lock(&mu_);
  return sync_count_;
}

}  // namespace dralens::driver::slices
