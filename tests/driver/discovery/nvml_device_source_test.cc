// NvmlDeviceSource against the fake libnvidia-ml.so.1 built from fake_nvml/fake_nvml.cc (no GPU
// needed). The fake's control functions are reached through dlopen of the same file.
#include "driver/discovery/nvml/nvml_device_source.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "driver/discovery/nvml/nvml_library.h"
#include "driver/discovery/nvml/nvml_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/driver/discovery/fake_nvml_control.h"

namespace dralens::driver::discovery {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::FakeNvml;
using testing::kA100;
using testing::kH100;
using NvmlDeviceSourceTest = testing::NvmlFixture;

TEST_F(NvmlDeviceSourceTest, DiscoversTheScriptedMachineReadOnly) {
  auto source = Make();
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(fake_.InitCount(), 1);
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  EXPECT_EQ(fake_.MutationCount(), 0) << "discovery must not change any GPU setting";
  EXPECT_EQ(inventory->driver_version(), "550.163.01");
  EXPECT_EQ(inventory->cuda_driver_version(), "12.4");
  ASSERT_EQ(inventory->gpus().size(), 2u);

  // Ordered by minor: the A100 (index 1) has minor 0.
  const model::GpuInfo& a100 = inventory->gpus()[0];
  EXPECT_EQ(a100.uuid, kA100);
  EXPECT_EQ(a100.minor, 0u);
  EXPECT_EQ(a100.index, 1u);
  EXPECT_EQ(a100.product_name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(a100.brand, "Tesla");
  EXPECT_EQ(a100.architecture, "Ampere");
  EXPECT_EQ(a100.CudaComputeCapability(), "8.0");
  EXPECT_EQ(a100.memory_bytes, 40960ULL << 20);
  EXPECT_EQ(a100.pci_bus_id, "0000:43:00.0");
  EXPECT_EQ(a100.pcie_root, "pci0000:40");
  EXPECT_EQ(a100.numa_node, std::nullopt);  // sysfs says -1
  EXPECT_TRUE(a100.mig_capable);
  EXPECT_FALSE(a100.mig_enabled());
  EXPECT_EQ(a100.mig_profiles, model::FindMigBoard("a100-40gb")->profiles);

  const model::GpuInfo& h100 = inventory->gpus()[1];
  EXPECT_EQ(h100.uuid, kH100);
  EXPECT_EQ(h100.minor, 2u);
  EXPECT_EQ(h100.index, 0u);
  EXPECT_EQ(h100.product_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.brand, "Nvidia");
  EXPECT_EQ(h100.architecture, "Hopper");
  EXPECT_EQ(h100.CudaComputeCapability(), "9.0");
  EXPECT_EQ(h100.memory_bytes, 81559ULL << 20);
  EXPECT_EQ(h100.pci_bus_id, "0000:1b:00.0");
  EXPECT_EQ(h100.pcie_root, "pci0000:10");
  EXPECT_EQ(h100.numa_node, 1);  // sysfs, not nvmlDeviceGetNumaNodeId's CPU-less node 7
  EXPECT_EQ(h100.driver_version, "550.163.01");
  EXPECT_EQ(h100.cuda_driver_version, "12.4");
  EXPECT_TRUE(h100.mig_enabled());
  EXPECT_EQ(h100.mig_mode_pending, model::MigMode::kEnabled);
  EXPECT_EQ(h100.memory_slices, 8u);
  // Names computed per §1.4 from memory sizes, IDs, engines and placements all equal the
  // reference table.
  EXPECT_EQ(h100.mig_profiles, model::FindMigBoard("h100-80gb")->profiles);

  ASSERT_EQ(inventory->mig_devices().size(), 2u);
  const model::MigDevice& small = inventory->mig_devices()[0];
  EXPECT_EQ(small.uuid, "MIG-12345678-1234-1234-1234-123456789abc");
  EXPECT_EQ(small.parent_uuid, kH100);
  EXPECT_EQ(small.parent_minor, 2u);
  EXPECT_EQ(small.profile.name, "1g.10gb");
  EXPECT_EQ(small.placement, (model::MigPlacement{0, 1}));
  EXPECT_EQ(small.gi_id, 7u);
  EXPECT_EQ(small.ci_id, 0u);
  const model::MigDevice& big = inventory->mig_devices()[1];
  EXPECT_EQ(big.uuid, "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
  EXPECT_EQ(big.profile.name, "3g.40gb");
  EXPECT_EQ(big.placement, (model::MigPlacement{4, 4}));
  EXPECT_EQ(big.gi_id, 2u);
  EXPECT_EQ(big.ci_profile_id, 2u);
  EXPECT_EQ(big.ProfileName(), "3g.40gb");

  source.reset();
  EXPECT_EQ(fake_.InitCount(), 0) << "one nvmlShutdown per init";
}

TEST_F(NvmlDeviceSourceTest, NotMigCapableGpu) {
  fake_.SetMigSupported(1, false);
  auto source = Make();
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  const model::GpuInfo* a100 = inventory->FindGpuByUuid(kA100);
  ASSERT_NE(a100, nullptr);
  EXPECT_FALSE(a100->mig_capable);
  EXPECT_TRUE(a100->mig_profiles.empty());
  EXPECT_EQ(a100->memory_slices, 0u);
  EXPECT_EQ(source->GetMigMode(kA100).status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(NvmlDeviceSourceTest, LostGpuIsLeftOut) {
  fake_.SetGpuLost(0, true);
  auto source = Make();
  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  ASSERT_EQ(inventory->gpus().size(), 1u);
  EXPECT_EQ(inventory->gpus()[0].uuid, kA100);
  EXPECT_TRUE(inventory->mig_devices().empty());

  auto event = source->WaitForEvent(absl::Milliseconds(10));
  ASSERT_TRUE(event.ok()) << event.status();
  ASSERT_TRUE(event->has_value());
  EXPECT_EQ((*event)->kind, HealthEventKind::kGpuLost);
  EXPECT_EQ((*event)->gpu_uuid, "");
}

TEST_F(NvmlDeviceSourceTest, XidEvents) {
  auto source = Make();
  auto idle = source->WaitForEvent(absl::Milliseconds(10));
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_FALSE(idle->has_value());
  fake_.PushXid(0, 48, 2, 0);
  auto event = source->WaitForEvent(absl::Milliseconds(10));
  ASSERT_TRUE(event.ok() && event->has_value());
  EXPECT_EQ(**event, (HealthEvent{kH100, HealthEventKind::kXid, 48, 2, 0}));
  fake_.PushXid(1, 79, kNoMigInstance, kNoMigInstance);
  event = source->WaitForEvent(absl::Milliseconds(10));
  ASSERT_TRUE(event.ok() && event->has_value());
  EXPECT_EQ((*event)->gpu_uuid, kA100);
  EXPECT_EQ((*event)->gi_id, kNoMigInstance);
  EXPECT_EQ(fake_.MutationCount(), 0);
}

TEST_F(NvmlDeviceSourceTest, CreateAndDestroyMigDevices) {
  auto source = Make();
  auto created = source->CreateMigDevice(kH100, "1g.10gb", 1);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->parent_uuid, kH100);
  EXPECT_EQ(created->parent_minor, 2u);
  EXPECT_EQ(created->gi_id, 8u);
  EXPECT_EQ(created->placement, (model::MigPlacement{1, 1}));
  EXPECT_EQ(created->profile.name, "1g.10gb");
  EXPECT_THAT(created->uuid, ::testing::StartsWith("MIG-"));

  auto inventory = source->Discover();
  ASSERT_TRUE(inventory.ok());
  EXPECT_EQ(inventory->mig_devices().size(), 3u);
  EXPECT_NE(inventory->FindMigDeviceByUuid(created->uuid), nullptr);

  auto overlap = source->CreateMigDevice(kH100, "2g.20gb", 0);
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(overlap.status().message(), HasSubstr("NVML_ERROR_INSUFFICIENT_RESOURCES"));
  auto invalid = source->CreateMigDevice(kH100, "2g.20gb", 1);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  auto mig_off = source->CreateMigDevice(kA100, "1g.5gb", 0);
  EXPECT_EQ(mig_off.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(mig_off.status().message(), HasSubstr("NVML_ERROR_NOT_SUPPORTED"));
  EXPECT_EQ(source->CreateMigDevice(kH100, "1g.5gb", 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(source->CreateMigDevice("GPU-nope", "1g.10gb", 0).status().code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE(source->DestroyMigDevice(created->uuid).ok());
  EXPECT_EQ(source->DestroyMigDevice(created->uuid).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(source->DestroyMigInstance(kH100, 2, 0).ok());
  const absl::Status gone = source->DestroyMigInstance(kH100, 2, 0);
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("nvmlDeviceGetGpuInstanceById"));
  inventory = source->Discover();
  ASSERT_TRUE(inventory.ok());
  ASSERT_EQ(inventory->mig_devices().size(), 1u);
  EXPECT_EQ(inventory->mig_devices()[0].gi_id, 7u);

  EXPECT_EQ(*source->GetMigMode(kA100),
            (MigModeState{model::MigMode::kDisabled, model::MigMode::kDisabled}));
  // Ampere: the change waits for a GPU reset.
  ASSERT_TRUE(source->SetMigMode(kA100, true).ok());
  EXPECT_EQ(*source->GetMigMode(kA100),
            (MigModeState{model::MigMode::kDisabled, model::MigMode::kEnabled}));
  EXPECT_EQ(source->CreateMigDevice(kA100, "7g.40gb", 0).status().code(),
            absl::StatusCode::kUnimplemented);
  // Hopper: at once; disabling with instances left is refused.
  const absl::Status busy = source->SetMigMode(kH100, false);
  EXPECT_THAT(busy.message(), HasSubstr("NVML_ERROR_IN_USE"));
}

TEST_F(NvmlDeviceSourceTest, TimeSliceRunsNvidiaSmiWithPreload) {
#if defined(__SANITIZE_ADDRESS__)
  // An ASan-built fake library cannot be preloaded into the uninstrumented /bin/sh.
  GTEST_SKIP() << "LD_PRELOAD of a sanitizer-built library";
#endif
  const std::filesystem::path log = root_ / "smi.log";
  const std::filesystem::path script = root_ / "nvidia-smi";
  std::filesystem::create_directories(root_);
  std::ofstream(script) << "#!/bin/sh\necho \"$*\" >> '" << log.string()
                        << "'\necho \"preload=$LD_PRELOAD\" >> '" << log.string() << "'\n";
  chmod(script.c_str(), 0755);
  NvmlOptions options = Options();
  options.nvidia_smi_path = script.string();
  auto source = NvmlDeviceSource::Create(options);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE((*source)->SetTimeSlice(kH100, TimeSlice::kMedium).ok());
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  const std::string preload = std::string("preload=") + FAKE_NVML_PATH;
  EXPECT_THAT(
      lines, ElementsAre(std::string("-i ") + kH100 + " -c DEFAULT", ::testing::StartsWith(preload),
                         std::string("compute-policy -i ") + kH100 + " --set-timeslice 2",
                         ::testing::StartsWith(preload)));
  EXPECT_EQ((*source)->SetTimeSlice("GPU-nope", TimeSlice::kShort).code(),
            absl::StatusCode::kNotFound);

  std::ofstream(script) << "#!/bin/sh\nexit 3\n";
  const absl::Status failed = (*source)->SetTimeSlice(kH100, TimeSlice::kShort);
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(failed.message(), HasSubstr("exit status 3"));
}

TEST(NvmlLibraryTest, MissingLibraryNamesIt) {
  NvmlOptions options;
  options.library_path = "/nonexistent/dir/libnvidia-ml.so.1";
  auto source = NvmlDeviceSource::Create(options);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(source.status().message(), HasSubstr("/nonexistent/dir/libnvidia-ml.so.1"));
}

TEST(NvmlLibraryTest, MissingSymbolNamesIt) {
  auto lib = nvml::NvmlLibrary::Load(FAKE_NVML_MISSING_PATH);
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lib.status().message(), HasSubstr("nvmlDeviceGetCudaComputeCapability"));
  EXPECT_THAT(lib.status().message(), HasSubstr(FAKE_NVML_MISSING_PATH));
}

TEST(NvmlLibraryTest, ResolvesVersionedNames) {
  auto lib = nvml::NvmlLibrary::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_NE((*lib)->api().DeviceGetNumaNodeId, nullptr);
  const std::vector<std::string> required = nvml::NvmlLibrary::RequiredSymbols();
  EXPECT_THAT(required, ::testing::Contains("nvmlDeviceGetPciInfo_v3"));
  EXPECT_THAT(required, ::testing::Contains("nvmlEventSetWait_v2"));
  EXPECT_THAT(required, ::testing::Not(::testing::Contains("nvmlDeviceGetNumaNodeId")));
}

TEST(NvmlHelpers, Conversions) {
  EXPECT_EQ(NormalizePciBusId("00000000:1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(NormalizePciBusId("0001:3A:00.0"), "0001:3a:00.0");
  EXPECT_EQ(BrandName(14), "Nvidia");
  EXPECT_EQ(BrandName(2), "Tesla");
  EXPECT_EQ(BrandName(99), "Unknown");
  EXPECT_EQ(ArchitectureName(9), "Hopper");
  EXPECT_EQ(ArchitectureName(8), "Ada Lovelace");
  EXPECT_EQ(ArchitectureName(0xFFFFFFFF), "Unknown");
  EXPECT_EQ(CudaDriverVersionString(12040), "12.4");
  EXPECT_EQ(CudaDriverVersionString(13000), "13.0");
}

TEST(NvmlStatus, MapsCodesAndNames) {
  using nvml::NvmlStatus;
  EXPECT_TRUE(NvmlStatus(nvml::NVML_SUCCESS, "x").ok());
  const absl::Status s = NvmlStatus(nvml::NVML_ERROR_INSUFFICIENT_RESOURCES, "create");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "create: NVML_ERROR_INSUFFICIENT_RESOURCES (23)");
  EXPECT_EQ(NvmlStatus(nvml::NVML_ERROR_NOT_FOUND, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(NvmlStatus(nvml::NVML_ERROR_IN_USE, "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(NvmlStatus(nvml::NVML_ERROR_GPU_IS_LOST, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NvmlStatus(nvml::NVML_ERROR_TIMEOUT, "x").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(nvml::NvmlReturnName(123), "NVML_ERROR_123");
  EXPECT_EQ(nvml::NvmlReturnName(999), "NVML_ERROR_UNKNOWN");
}

}  // namespace
}  // namespace dralens::driver::discovery
