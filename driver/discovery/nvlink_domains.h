// NVLink domains: which GPUs reach each other over NVLink, and the name each group is published
// under (the nvlinkDomain device attribute). Pure; the NVML and simulated sources both describe
// their GPUs' links as NvLinkEndpoints and take the names from NvLinkDomains.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dralens::driver::discovery {

// What discovery learnt of one GPU's NVLinks.
struct NvLinkEndpoint {
  std::string uuid = {};
  std::string pci_bus_id = {};  // normalized ("0000:1b:00.0"); empty when unknown
  // Links that are up, whether or not their far end could be read.
  uint32_t active_links = 0;
  // The normalized PCI bus IDs at the far end of its active links: another GPU of the node (a
  // direct link or an NVLink bridge) or an NVSwitch. Repeats are fine (several links to one
  // peer).
  std::vector<std::string> remote_bus_ids = {};
  // FabricDomain() of the NVLink fabric the GPU is registered with (multi-node NVLink, e.g.
  // GB200 NVL72); empty when it is not.
  std::string fabric_domain = {};
};

// "<cluster UUID>.<clique ID>", the UUID as lower-case 8-4-4-4-12 hex: the identity NVIDIA's
// software gives an NVLink clique (the form of the GPU operator's nvidia.com/gpu.clique label).
// GPUs on any node with the same value share one NVLink fabric partition.
std::string FabricDomain(const std::array<unsigned char, 16>& cluster_uuid, uint32_t clique_id);

// The NVLink domain of each GPU, in the order given:
//  - a GPU registered with a fabric: its fabric_domain;
//  - else, a GPU with an active link: the UUID of the GPU with the lowest PCI bus ID among the
//    linked GPUs of its node-local component. The component is the connected part of the graph
//    whose edges are the active links, between the node's GPUs and the far ends that are not
//    one of them (NVSwitches): all GPUs on one NVSwitch system are one component, two GPUs
//    joined by an NVLink bridge another, and on a direct-link mesh GPUs may reach each other
//    through a third one. A GPU UUID is unique across nodes, so a node-local domain never
//    equals one on another node;
//  - else (no active link): empty.
// A GPU that reports no active link of its own has no domain, even if another GPU's link names
// it.
std::vector<std::string> NvLinkDomains(const std::vector<NvLinkEndpoint>& gpus);

}  // namespace dralens::driver::discovery
