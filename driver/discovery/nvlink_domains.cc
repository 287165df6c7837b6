#include "driver/discovery/nvlink_domains.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dralens::driver::discovery {
namespace {

// Union-find over the link graph's vertices: GPUs by bus ID and the far ends of their links.
class Components {
 public:
  std::string Find(const std::string& v) {
    auto [it, inserted] = parent_.emplace(v, v);
    if (inserted || it->second == v) {
      return v;
    }
    std::string root = Find(it->second);
    parent_[v] = root;
    return root;
  }
  void Join(const std::string& a, const std::string& b) {
    const std::string ra = Find(a);
    const std::string rb = Find(b);
    if (ra != rb) {
      parent_[ra] = rb;
    }
  }

 private:
  std::map<std::string, std::string> parent_;
};

// The vertex of a GPU: its bus ID, or its UUID when the bus ID is unknown (then no link can
// name it).
std::string Vertex(const NvLinkEndpoint& gpu) {
  return gpu.pci_bus_id.empty() ? absl::StrCat("uuid:", gpu.uuid) : gpu.pci_bus_id;
}

}  // namespace

std::string FabricDomain(const std::array<unsigned char, 16>& u, uint32_t clique_id) {
  return absl::StrFormat("%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x.%u",
                         u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
                         u[12], u[13], u[14], u[15], clique_id);
}

std::vector<std::string> NvLinkDomains(const std::vector<NvLinkEndpoint>& gpus) {
  Components components;
  for (const NvLinkEndpoint& gpu : gpus) {
    if (gpu.active_links == 0) {
      continue;
    }
    const std::string self = Vertex(gpu);
    components.Find(self);
    for (const std::string& remote : gpu.remote_bus_ids) {
      if (!remote.empty()) {
        components.Join(self, remote);
      }
    }
  }
  // Each component is named after its linked GPU with the lowest bus ID.
  std::map<std::string, const NvLinkEndpoint*> first;  // component root -> GPU
  for (const NvLinkEndpoint& gpu : gpus) {
    if (gpu.active_links == 0) {
      continue;
    }
    const NvLinkEndpoint*& named = first[components.Find(Vertex(gpu))];
    if (named == nullptr || Vertex(gpu) < Vertex(*named)) {
      named = &gpu;
    }
  }
  std::vector<std::string> domains;
  domains.reserve(gpus.size());
  for (const NvLinkEndpoint& gpu : gpus) {
    if (!gpu.fabric_domain.empty()) {
      domains.push_back(gpu.fabric_domain);
    } else if (gpu.active_links == 0) {
      domains.emplace_back();
    } else {
      domains.push_back(first.at(components.Find(Vertex(gpu)))->uuid);
    }
  }
  return domains;
}

}  // namespace dralens::driver::discovery
