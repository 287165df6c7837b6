// NvmlDeviceSource against what real nodes answer: GPUs outside the container's device cgroup,
// MIG calls without the MIG capability, coherent platforms' NUMA nodes, an undefined event set,
// registrations lost at a MIG mode change, drivers that know fewer profiles, compute-instance
// profile IDs that are not their indices, and libraries without the versioned entry points.
#include <map>
#include <optional>
#include <string>

#include "driver/discovery/nvml/nvml_device_source.h"
#include "driver/discovery/nvml/nvml_library.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/driver/discovery/fake_nvml_control.h"

namespace dralens::driver::discovery {
namespace {

using ::testing::HasSubstr;
using testing::kA100;
using testing::kH100;

class NvmlQuirksTest : public testing::NvmlFixture {
 protected:
  std::unique_ptr<NvmlDeviceSource> MakeWithMetrics() {
    NvmlOptions options = Options();
    options.registry = &registry_;
    auto source = NvmlDeviceSource::Create(options);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? std::move(*source) : nullptr;
  }

  // The value of gauge `name` with labels `labels`; nullopt when it has no such series.
  std::optional<double> Gauge(const std::string& name,
                              const std::map<std::string, std::string>& labels = {}) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name) {
        continue;
      }
      for (const auto& metric : family.metric) {
        std::map<std::string, std::string> have;
        for (const auto& label : metric.label) {
          have[label.name] = label.value;
        }
        if (have == labels) {
          return metric.gauge.value;
        }
      }
    }
    return std::nullopt;
  }

  // The next event, failing the test on an error.
  std::optional<HealthEvent> Next(NvmlDeviceSource& source) {
    auto event = source.WaitForEvent(absl::Milliseconds(1));
    EXPECT_TRUE(event.ok()) << event.status();
    return event.ok() ? *event : std::nullopt;
  }

  prometheus::Registry registry_;
};

TEST_F(NvmlQuirksTest, AGpuOutsideTheCgroupLeavesTheOthersAndIsCounted) {
  fake_.SetDenied(0, true);  // the H100 answers NVML_ERROR_NO_PERMISSION
  auto source = MakeWithMetrics();
  ASSERT_NE(source, nullptr);
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  ASSERT_EQ(inventory->gpus().size(), 1u);
  EXPECT_EQ(inventory->gpus()[0].uuid, kA100);
  EXPECT_TRUE(inventory->mig_devices().empty());
  EXPECT_EQ(Gauge("dralens_discovery_denied", {{"what", "gpu"}}), 1);

  // The denied GPU is not watched either, and not reported unmonitored: it is not ours.
  EXPECT_EQ(Next(*source), std::nullopt);
  EXPECT_EQ(Gauge("dralens_health_unmonitored_gpus"), 0);

  fake_.SetDenied(0, false);
  inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  EXPECT_EQ(inventory->gpus().size(), 2u);
  EXPECT_EQ(Gauge("dralens_discovery_denied", {{"what", "gpu"}}), 0);
}

TEST_F(NvmlQuirksTest, WithoutTheMigCapabilityMigIsLeftOutAndCounted) {
  fake_.SetMigCapability(false);
  auto source = MakeWithMetrics();
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  ASSERT_EQ(inventory->gpus().size(), 2u);
  // Neither GPU's profiles could be read, and the H100's two MIG devices not either.
  for (const model::GpuInfo& gpu : inventory->gpus()) {
    EXPECT_TRUE(gpu.mig_profiles.empty()) << gpu.uuid;
  }
  EXPECT_TRUE(inventory->mig_devices().empty());
  EXPECT_EQ(Gauge("dralens_discovery_denied", {{"what", "mig_profiles"}}), 2);
  EXPECT_EQ(Gauge("dralens_discovery_denied", {{"what", "mig_device"}}), 2);
  EXPECT_EQ(Gauge("dralens_discovery_denied", {{"what", "gpu"}}), 0);
}

TEST_F(NvmlQuirksTest, NumaNodeComesFromSysfsNotFromNvml) {
  auto source = Make();
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  // NVML answers 7 for the H100 (a GPU-memory node without CPUs) and 0 for the A100.
  EXPECT_EQ(inventory->FindGpuByUuid(kH100)->numa_node, 1);
  EXPECT_EQ(inventory->FindGpuByUuid(kA100)->numa_node, std::nullopt);  // sysfs -1
  // No sysfs entry at all: no NUMA node, whatever NVML says.
  std::filesystem::remove_all(root_);
  inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  EXPECT_EQ(inventory->FindGpuByUuid(kH100)->numa_node, std::nullopt);
}

TEST_F(NvmlQuirksTest, ProfileEnumerationStopsWhereTheDriverStops) {
  // A driver that knows profile indices 0..4 only: 7 (+me) and 9 (double memory) answer
  // INVALID_ARGUMENT, and the enumeration ends there.
  fake_.SetProfileIndexLimit(5);
  auto source = Make();
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  const model::GpuInfo* a100 = inventory->FindGpuByUuid(kA100);
  ASSERT_NE(a100, nullptr);
  std::vector<uint32_t> indices;
  for (const model::MigProfile& p : a100->mig_profiles) {
    indices.push_back(p.gi_profile_index);
  }
  EXPECT_THAT(indices, ::testing::ElementsAre(0u, 1u, 2u, 3u, 4u));
}

TEST_F(NvmlQuirksTest, ComputeInstanceProfileIdsAreMappedNotUsedAsIndices) {
  fake_.SwapCiProfileIds(true);  // CI profile ID = index ^ 1
  auto source = Make();
  ASSERT_TRUE(source->DestroyMigInstance(kH100, 2, 0).ok());
  ASSERT_TRUE(source->DestroyMigInstance(kH100, 7, 0).ok());
  auto created = source->CreateMigDevice(kH100, "4g.40gb", 0);
  ASSERT_TRUE(created.ok()) << created.status();
  // Index 3 (4 slices) has ID 2, which as an index would mean 3 slices.
  EXPECT_EQ(created->ci_profile_id, 2u);
  EXPECT_EQ(created->ci_slices, 4u);
  EXPECT_EQ(created->ProfileName(), "4g.40gb");
}

TEST_F(NvmlQuirksTest, RequestsTheUnavailableAndRecoveryEventsWhereSupported) {
  auto source = Make();
  EXPECT_EQ(Next(*source), std::nullopt);
  EXPECT_EQ(fake_.RegisteredEvents(0), nvml::nvmlEventTypeXidCriticalError |
                                           nvml::nvmlEventTypeGpuUnavailableError |
                                           nvml::nvmlEventTypeGpuRecoveryAction);
  EXPECT_EQ(fake_.RegisteredEvents(1), nvml::nvmlEventTypeXidCriticalError);
  fake_.PushEvent(0, nvml::nvmlEventTypeGpuUnavailableError, 0);
  EXPECT_EQ(Next(*source),
            (HealthEvent{kH100, HealthEventKind::kGpuLost, 79, kNoMigInstance, kNoMigInstance}));
  // A recovery action asks for a reset: no event, but the set is built again.
  const int sets = fake_.EventSetsCreated();
  fake_.PushEvent(0, nvml::nvmlEventTypeGpuRecoveryAction, 1);
  EXPECT_EQ(Next(*source), std::nullopt);
  EXPECT_EQ(Next(*source), std::nullopt);
  EXPECT_EQ(fake_.EventSetsCreated(), sets + 1);
  EXPECT_EQ(fake_.EventSetsAlive(), 1);
}

TEST_F(NvmlQuirksTest, TheEventSetIsFreedAndRebuiltAfterUnknown) {
  auto source = Make();
  EXPECT_EQ(Next(*source), std::nullopt);
  ASSERT_EQ(fake_.EventSetsCreated(), 1);
  fake_.FailNextWait(nvml::NVML_ERROR_UNKNOWN);
  auto failed = source->WaitForEvent(absl::Milliseconds(1));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(fake_.EventSetsAlive(), 0) << "an undefined set must be freed";
  // The next wait registers again, and Xids flow.
  fake_.PushXid(1, 48, kNoMigInstance, kNoMigInstance);
  auto event = Next(*source);
  EXPECT_EQ(fake_.EventSetsCreated(), 2);
  EXPECT_EQ(fake_.EventSetsAlive(), 1);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->gpu_uuid, kA100);
  EXPECT_EQ(event->xid, 48u);
}

TEST_F(NvmlQuirksTest, AMigModeChangeRebuildsTheRegistration) {
  auto source = Make();
  EXPECT_EQ(Next(*source), std::nullopt);
  // The H100's instances go, then MIG mode off: a Hopper GPU is reset by the switch.
  ASSERT_TRUE(source->DestroyMigInstance(kH100, 2, 0).ok());
  ASSERT_TRUE(source->DestroyMigInstance(kH100, 7, 0).ok());
  ASSERT_TRUE(source->SetMigMode(kH100, false).ok());
  EXPECT_EQ(fake_.RegisteredEvents(0), 0u);
  EXPECT_EQ(Next(*source), std::nullopt);
  EXPECT_NE(fake_.RegisteredEvents(0), 0u);
  EXPECT_EQ(fake_.EventSetsCreated(), 2);
  EXPECT_EQ(fake_.EventSetsAlive(), 1);
  fake_.PushXid(0, 94, kNoMigInstance, kNoMigInstance);
  auto event = Next(*source);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->gpu_uuid, kH100);
}

TEST_F(NvmlQuirksTest, AGpuWithoutXidEventsIsReportedUnmonitoredAndCounted) {
  fake_.SetSupportedEvents(1, 0);
  auto source = MakeWithMetrics();
  auto event = Next(*source);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(*event,
            (HealthEvent{kA100, HealthEventKind::kUnmonitored, 0, kNoMigInstance, kNoMigInstance}));
  EXPECT_EQ(Gauge("dralens_health_unmonitored_gpus"), 1);
  EXPECT_EQ(Next(*source), std::nullopt);  // once per set
}

TEST_F(NvmlQuirksTest, DestroyingOnAGpuWithMigModeOffAnswersNotFound) {
  // After a reset that took MIG mode with it, the recorded instance is simply not there.
  auto source = Make();
  const absl::Status gone = source->DestroyMigInstance(kA100, 1, 0);
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("NVML_ERROR_NOT_FOUND"));
}

TEST(NvmlLibraryTest, LegacyOnlyLibrariesAreRefusedNamingTheMinimumDriver) {
  auto lib = nvml::NvmlLibrary::Load(FAKE_NVML_LEGACY_PATH);
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lib.status().message(), HasSubstr("nvmlEventSetWait_v2"));
  EXPECT_THAT(lib.status().message(), HasSubstr(nvml::kMinimumDriver));
}

}  // namespace
}  // namespace dralens::driver::discovery
