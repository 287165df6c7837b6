// NvmlDeviceSource's NVLink domains against the fake libnvidia-ml.so.1: an NVSwitch system,
// bridged pairs, no NVLink, a registered fabric and the ways NVML says there is none, and a
// library without the calls.
#include <array>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "driver/discovery/nvml/nvml_device_source.h"
#include "driver/discovery/nvml/nvml_library.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/driver/discovery/fake_nvml_control.h"

namespace dralens::driver::discovery {
namespace {

using testing::kA100;
using testing::kH100;

// The fake's GPU at `index` (2 and up: the ones fakeNvmlSetGpuCount adds).
std::string UuidOf(unsigned index) {
  if (index < 2) {
    return index == 0 ? kH100 : kA100;
  }
  return absl::StrFormat("GPU-%08x-0000-4000-8000-%012x", index, index);
}

constexpr std::array<unsigned char, 16> kCluster = {0x3f, 0x2a, 0x00, 0x01, 0xab, 0xcd, 0x40, 0x00,
                                                    0x80, 0x00, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc};
constexpr char kClique[] = "3f2a0001-abcd-4000-8000-123456789abc.32766";

class NvmlNvLinkTest : public testing::NvmlFixture {
 protected:
  // GPU index -> nvlink_domain after one discovery.
  std::map<unsigned, std::string> Domains(unsigned count) {
    std::map<unsigned, std::string> out;
    auto source = Make();
    if (source == nullptr) {
      return out;
    }
    auto inventory = source->Discover();
    EXPECT_TRUE(inventory.ok()) << inventory.status();
    if (!inventory.ok()) {
      return out;
    }
    EXPECT_EQ(inventory->gpus().size(), count);
    for (const model::GpuInfo& gpu : inventory->gpus()) {
      out[gpu.index] = gpu.nvlink_domain;
    }
    return out;
  }

  // Every link of GPU `gpu` up, spread over the four NVSwitches of an HGX board.
  void OnNvSwitches(unsigned gpu) {
    for (unsigned link = 0; link < 18; ++link) {
      fake_.SetNvLink(gpu, link, true, absl::StrFormat("00000000:%02X:00.0", 0x05 + link % 4));
    }
  }
};

TEST_F(NvmlNvLinkTest, EightGpusOnNvSwitchesShareOneDomain) {
  fake_.SetGpuCount(8);
  for (unsigned gpu = 0; gpu < 8; ++gpu) {
    OnNvSwitches(gpu);
  }
  const auto domains = Domains(8);
  ASSERT_EQ(domains.size(), 8u);
  for (const auto& [index, domain] : domains) {
    // Named after GPU 0, the lowest bus (1b); the GPU's MIG mode does not matter here.
    EXPECT_EQ(domain, kH100) << "GPU " << index;
  }
}

TEST_F(NvmlNvLinkTest, BridgedPairsAreTwoDomains) {
  fake_.SetGpuCount(4);
  // GPU 0 (bus 1b) with GPU 1 (43), GPU 2 (52) with GPU 3 (61); links 0-3 each way, and a link
  // that is down towards the other pair.
  for (unsigned link = 0; link < 4; ++link) {
    fake_.SetNvLink(0, link, true, "00000000:43:00.0");
    fake_.SetNvLink(1, link, true, "00000000:1B:00.0");
    fake_.SetNvLink(2, link, true, "00000000:61:00.0");
    fake_.SetNvLink(3, link, true, "00000000:52:00.0");
  }
  fake_.SetNvLink(1, 4, false, "00000000:52:00.0");
  const auto domains = Domains(4);
  EXPECT_EQ(domains.at(0), kH100);
  EXPECT_EQ(domains.at(1), kH100);
  EXPECT_EQ(domains.at(2), UuidOf(2));
  EXPECT_EQ(domains.at(3), UuidOf(2));
}

TEST_F(NvmlNvLinkTest, NoNvLinkNoDomain) {
  // NOT_SUPPORTED on every link, and on the fabric call: the fake's default.
  const auto domains = Domains(2);
  EXPECT_EQ(domains.at(0), "");
  EXPECT_EQ(domains.at(1), "");
}

TEST_F(NvmlNvLinkTest, LinksThatAreAllDownAreNoNvLink) {
  fake_.SetNvLink(0, 0, false, "00000000:43:00.0");
  fake_.SetNvLink(1, 0, false, "00000000:1B:00.0");
  const auto domains = Domains(2);
  EXPECT_EQ(domains.at(0), "");
  EXPECT_EQ(domains.at(1), "");
}

TEST_F(NvmlNvLinkTest, AnUnreadableFarEndLeavesADomainOfOne) {
  fake_.SetNvLink(0, 0, true, "");
  const auto domains = Domains(2);
  EXPECT_EQ(domains.at(0), kH100);
  EXPECT_EQ(domains.at(1), "");
}

TEST_F(NvmlNvLinkTest, ARegisteredFabricNamesTheDomain) {
  // Multi-node NVLink: the clique is the domain, shared with GPUs on other nodes; the local
  // links (here to switches) do not matter then.
  OnNvSwitches(0);
  OnNvSwitches(1);
  fake_.SetFabric(0, nvml::NVML_SUCCESS, nvml::NVML_GPU_FABRIC_STATE_COMPLETED, nvml::NVML_SUCCESS,
                  kCluster, 32766);
  fake_.SetFabric(1, nvml::NVML_SUCCESS, nvml::NVML_GPU_FABRIC_STATE_COMPLETED, nvml::NVML_SUCCESS,
                  kCluster, 32766);
  const auto domains = Domains(2);
  EXPECT_EQ(domains.at(0), kClique);
  EXPECT_EQ(domains.at(1), kClique);
}

TEST_F(NvmlNvLinkTest, AFabricNotReadyOrNotSupportedIsNoFabric) {
  struct Case {
    const char* what;
    int rc;
    unsigned state;
    int status;
    std::array<unsigned char, 16> uuid;
  };
  const std::array<unsigned char, 16> zero = {};
  const std::vector<Case> cases = {
      {"NOT_SUPPORTED", nvml::NVML_ERROR_NOT_SUPPORTED, 0, 0, kCluster},
      {"FUNCTION_NOT_FOUND", nvml::NVML_ERROR_FUNCTION_NOT_FOUND, 0, 0, kCluster},
      {"state NOT_SUPPORTED", nvml::NVML_SUCCESS, nvml::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
       nvml::NVML_SUCCESS, kCluster},
      {"registration in progress", nvml::NVML_SUCCESS, nvml::NVML_GPU_FABRIC_STATE_IN_PROGRESS,
       nvml::NVML_SUCCESS, kCluster},
      {"completed with an error", nvml::NVML_SUCCESS, nvml::NVML_GPU_FABRIC_STATE_COMPLETED,
       nvml::NVML_ERROR_UNKNOWN, kCluster},
      {"completed without a cluster", nvml::NVML_SUCCESS, nvml::NVML_GPU_FABRIC_STATE_COMPLETED,
       nvml::NVML_SUCCESS, zero},
  };
  for (const Case& c : cases) {
    fake_.Reset();
    OnNvSwitches(0);
    OnNvSwitches(1);
    fake_.SetFabric(0, c.rc, c.state, c.status, c.uuid, 7);
    fake_.SetFabric(1, c.rc, c.state, c.status, c.uuid, 7);
    const auto domains = Domains(2);
    // The local component, never an error.
    EXPECT_EQ(domains.at(0), kH100) << c.what;
    EXPECT_EQ(domains.at(1), kH100) << c.what;
  }
}

TEST_F(NvmlNvLinkTest, ALibraryWithoutTheCallsReportsNoNvLink) {
  auto lib = nvml::NvmlLibrary::Load(FAKE_NVML_NO_TOPOLOGY_PATH);
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->api().DeviceGetNvLinkState, nullptr);
  EXPECT_EQ((*lib)->api().DeviceGetNvLinkRemotePciInfo, nullptr);
  EXPECT_EQ((*lib)->api().DeviceGetGpuFabricInfoV, nullptr);
  lib->reset();

  OnNvSwitches(0);
  OnNvSwitches(1);
  NvmlOptions options = Options();
  options.library_path = FAKE_NVML_NO_TOPOLOGY_PATH;
  auto source = NvmlDeviceSource::Create(options);
  ASSERT_TRUE(source.ok()) << source.status();
  auto inventory = (*source)->Discover();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  ASSERT_EQ(inventory->gpus().size(), 2u);
  for (const model::GpuInfo& gpu : inventory->gpus()) {
    EXPECT_EQ(gpu.nvlink_domain, "") << gpu.uuid;
  }
}

TEST_F(NvmlNvLinkTest, TheCallsAreOptional) {
  const std::vector<std::string> required = nvml::NvmlLibrary::RequiredSymbols();
  for (const char* name : {"nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                           "nvmlDeviceGetGpuFabricInfoV"}) {
    EXPECT_THAT(required, ::testing::Not(::testing::Contains(name)));
  }
  auto lib = nvml::NvmlLibrary::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_NE((*lib)->api().DeviceGetNvLinkState, nullptr);
  EXPECT_NE((*lib)->api().DeviceGetNvLinkRemotePciInfo, nullptr);
  EXPECT_NE((*lib)->api().DeviceGetGpuFabricInfoV, nullptr);
}

}  // namespace
}  // namespace dralens::driver::discovery
