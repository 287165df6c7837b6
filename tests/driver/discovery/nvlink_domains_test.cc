// NvLinkDomains: which GPUs form one NVLink domain and what it is called.
#include "driver/discovery/nvlink_domains.h"

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::driver::discovery {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

std::string Bus(int bus) { return absl::StrFormat("0000:%02x:00.0", bus); }

NvLinkEndpoint Gpu(int bus, std::vector<std::string> remotes) {
  return NvLinkEndpoint{.uuid = absl::StrFormat("GPU-%02x", bus),
                        .pci_bus_id = Bus(bus),
                        .active_links = static_cast<uint32_t>(remotes.size()),
                        .remote_bus_ids = std::move(remotes),
                        .fabric_domain = ""};
}

TEST(NvLinkDomainsTest, EightGpusOnFourNvSwitchesAreOneDomain) {
  // A DGX H100: every GPU has links to each of the four NVSwitches, none to another GPU.
  const std::vector<std::string> switches = {Bus(0x05), Bus(0x06), Bus(0x07), Bus(0x08)};
  std::vector<NvLinkEndpoint> gpus;
  for (int bus : {0xdb, 0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba}) {
    gpus.push_back(Gpu(bus, switches));
  }
  // Named after the GPU with the lowest bus ID, whatever the order given.
  EXPECT_THAT(NvLinkDomains(gpus), ::testing::Each(std::string("GPU-18")));
}

TEST(NvLinkDomainsTest, BridgedPairsAreTwoDomains) {
  // Four PCIe A100s, joined in pairs by NVLink bridges (three links each way).
  const std::vector<NvLinkEndpoint> gpus = {
      Gpu(0x17, {Bus(0x65), Bus(0x65), Bus(0x65)}), Gpu(0x65, {Bus(0x17), Bus(0x17), Bus(0x17)}),
      Gpu(0xca, {Bus(0xe3), Bus(0xe3), Bus(0xe3)}), Gpu(0xe3, {Bus(0xca), Bus(0xca), Bus(0xca)})};
  EXPECT_THAT(NvLinkDomains(gpus), ElementsAre("GPU-17", "GPU-17", "GPU-ca", "GPU-ca"));
}

TEST(NvLinkDomainsTest, GpusWithoutLinksHaveNone) {
  const std::vector<NvLinkEndpoint> gpus = {Gpu(0x17, {}), Gpu(0x65, {})};
  EXPECT_THAT(NvLinkDomains(gpus), ElementsAre("", ""));
  EXPECT_TRUE(NvLinkDomains({}).empty());
}

TEST(NvLinkDomainsTest, FabricCliqueWinsOverTheLocalComponent) {
  std::vector<NvLinkEndpoint> gpus = {Gpu(0x17, {Bus(0x05)}), Gpu(0x65, {Bus(0x05)}),
                                      Gpu(0xca, {})};
  gpus[0].fabric_domain = "fabric.1";
  gpus[2].fabric_domain = "fabric.1";  // a fabric without local links (links leave the node)
  EXPECT_THAT(NvLinkDomains(gpus), ElementsAre("fabric.1", "GPU-17", "fabric.1"));
}

TEST(NvLinkDomainsTest, ALinkWhoseFarEndIsUnknownMakesADomainOfOne) {
  NvLinkEndpoint lone = Gpu(0x65, {});
  lone.active_links = 2;  // up, but NVML did not say where to
  EXPECT_THAT(NvLinkDomains({Gpu(0x17, {Bus(0x05)}), lone, Gpu(0xca, {Bus(0x05)})}),
              ElementsAre("GPU-17", "GPU-65", "GPU-17"));
}

TEST(NvLinkDomainsTest, AGpuReportingNoLinkStaysOutEvenWhenNamed) {
  // GPU 0x65 reports nothing (its state could not be read); the others still pair up through it
  // as they would through any far end.
  EXPECT_THAT(NvLinkDomains({Gpu(0x17, {Bus(0x65)}), Gpu(0x65, {}), Gpu(0xca, {Bus(0x65)})}),
              ElementsAre("GPU-17", "", "GPU-17"));
}

TEST(NvLinkDomainsTest, UnknownBusIdsFallBackToTheUuid) {
  NvLinkEndpoint a = Gpu(0x17, {Bus(0x05)});
  NvLinkEndpoint b = Gpu(0x65, {Bus(0x05)});
  b.pci_bus_id = "";
  b.uuid = "GPU-aa";
  EXPECT_THAT(NvLinkDomains({b, a}), ElementsAreArray({"GPU-17", "GPU-17"}));
}

TEST(FabricDomainTest, LowerCaseUuidDotClique) {
  const std::array<unsigned char, 16> uuid = {0x3f, 0x2a, 0x00, 0x01, 0xAB, 0xCD, 0x40, 0x00,
                                              0x80, 0x00, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc};
  EXPECT_EQ(FabricDomain(uuid, 32766), "3f2a0001-abcd-4000-8000-123456789abc.32766");
  EXPECT_EQ(FabricDomain(uuid, 0), "3f2a0001-abcd-4000-8000-123456789abc.0");
}

}  // namespace
}  // namespace dralens::driver::discovery
