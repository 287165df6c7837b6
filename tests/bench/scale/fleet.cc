#include "tests/bench/scale/fleet.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dralens::bench::scale {
namespace {

constexpr Product kProducts[kProductCount] = {
    {"NVIDIA H100 80GB HBM3", "Hopper", 9, 0, 81559, "p5.48xlarge"},
    {"NVIDIA A100-SXM4-80GB", "Ampere", 8, 0, 81920, "p4de.24xlarge"},
    {"NVIDIA A100-SXM4-40GB", "Ampere", 8, 0, 40960, "p4d.24xlarge"},
    {"NVIDIA L40S", "Ada Lovelace", 8, 9, 46068, "g6e.48xlarge"},
    {"NVIDIA B200", "Blackwell", 10, 0, 183359, "p6-b200.48xlarge"},
};

bool AnyGpu(ProductId) { return true; }
bool IsH100(ProductId p) { return p == ProductId::kH100; }
bool LargeMemory(ProductId p) { return ProductOf(p).memory_mib >= 64 * 1024; }
bool IsAmpere(ProductId p) { return p == ProductId::kA100x80 || p == ProductId::kA100x40; }
bool Never(ProductId) { return false; }
bool IsB200(ProductId p) { return p == ProductId::kB200; }

const ClassDef kClasses[kClassCount] = {
    {"gpu.dralens.dev",
     "device.driver == 'gpu.dralens.dev' && device.attributes['gpu.dralens.dev'].type == 'gpu'",
     AnyGpu},
    {"h100.gpu.dralens.dev",
     "device.driver == 'gpu.dralens.dev' && "
     "device.attributes['gpu.dralens.dev'].productName == 'NVIDIA H100 80GB HBM3'",
     IsH100},
    {"large-memory.gpu.dralens.dev",
     "device.driver == 'gpu.dralens.dev' && "
     "device.capacity['gpu.dralens.dev'].memory.compareTo(quantity('64Gi')) >= 0",
     LargeMemory},
    {"ampere.gpu.dralens.dev",
     "device.driver == 'gpu.dralens.dev' && "
     "device.attributes['gpu.dralens.dev'].architecture == 'Ampere'",
     IsAmpere},
};

const SelectorDef kSelectors[] = {
    {"device.attributes['gpu.dralens.dev'].productName == 'NVIDIA GB200'", Never},
    {"device.attributes['gpu.dralens.dev'].productName == 'NVIDIA B200'", IsB200},
};

// PCI bus ids of the eight GPUs of a typical 8-GPU server.
constexpr int kBusIds[kGpusPerNode] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
constexpr const char* kWorkloads[] = {"train", "finetune", "infer", "eval", "embed"};
constexpr int kNamespaces = 16;

int Round(double x) { return static_cast<int>(std::lround(x)); }

// A class for a claim that holds a GPU of `product`, drawn so that the class matches it.
int ClassForHeld(ProductId product, Rng& rng) {
  const double u = rng.Unit();
  switch (product) {
    case ProductId::kH100:
      return u < 0.6 ? kClassH100 : (u < 0.8 ? kClassGpu : kClassLargeMemory);
    case ProductId::kA100x80:
      return u < 0.4 ? kClassAmpere : (u < 0.7 ? kClassLargeMemory : kClassGpu);
    case ProductId::kA100x40:
      return u < 0.5 ? kClassAmpere : kClassGpu;
    default:
      return kClassGpu;
  }
}

}  // namespace

const Product& ProductOf(ProductId id) { return kProducts[static_cast<int>(id)]; }
const ClassDef& ClassAt(int index) { return kClasses[index]; }
const SelectorDef& SelectorAt(int index) { return kSelectors[index]; }

const char* ToString(ClaimState state) {
  switch (state) {
    case ClaimState::kPending:
      return "pending";
    case ClaimState::kAllocated:
      return "allocated";
    case ClaimState::kReserved:
      return "reserved";
    case ClaimState::kInUse:
      return "in_use";
  }
  return "unknown";
}

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string Rng::Hex(int n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n, '0');
  for (char& c : out) {
    c = kDigits[Below(16)];
  }
  return out;
}

std::string Rng::Uuid() {
  std::string h = Hex(32);
  h[12] = '4';
  h[16] = "89ab"[Below(4)];
  return absl::StrCat(h.substr(0, 8), "-", h.substr(8, 4), "-", h.substr(12, 4), "-",
                      h.substr(16, 4), "-", h.substr(20));
}

std::string Rng::NameSuffix(int n) {
  // The alphabet of apimachinery's utilrand.String: no vowels, no confusable digits.
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string out(n, 'b');
  for (char& c : out) {
    c = kAlphabet[Below(sizeof(kAlphabet) - 1)];
  }
  return out;
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

ClaimState Fleet::StateOf(const Claim& claim) const {
  if (claim.gpus.empty()) {
    return ClaimState::kPending;
  }
  if (!claim.reserved) {
    return ClaimState::kAllocated;
  }
  const Pod& pod = pods[claim.pod];
  return pod.exists && pod.phase == PodPhase::kRunning ? ClaimState::kInUse : ClaimState::kReserved;
}

bool Fleet::Unavailable(const Gpu& gpu) const {
  const Node& node = nodes[gpu.node];
  return gpu.maintenance_taint || gpu.xid_taint || !node.ready || !node.exists;
}

bool Fleet::Matches(const Request& request, const Gpu& gpu) const {
  const ProductId product = ProductOfGpu(gpu);
  if (!ClassAt(request.device_class).matches(product)) {
    return false;
  }
  return request.selector == kNoSelector || SelectorAt(request.selector).matches(product);
}

std::string Fleet::DeviceName(const Gpu& gpu) const { return absl::StrCat("gpu-", gpu.minor); }

Fleet Generate(const FleetOptions& options) {
  Fleet fleet;
  fleet.options = options;
  Rng rng(options.seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(options.claims));
  const int n = std::max(options.claims, 1);
  const int node_count = (n + kGpusPerNode - 1) / kGpusPerNode;
  for (int i = 0; i < kNamespaces; ++i) {
    fleet.namespaces.push_back(absl::StrFormat("ml-team-%02d", i));
  }

  // Nodes and their products.
  const int b200 = std::max(1, Round(0.02 * node_count));
  const int h100 = Round(0.30 * node_count);
  const int a80 = Round(0.20 * node_count);
  const int a40 = Round(0.15 * node_count);
  std::vector<ProductId> products;
  products.insert(products.end(), b200, ProductId::kB200);
  products.insert(products.end(), h100, ProductId::kH100);
  products.insert(products.end(), a80, ProductId::kA100x80);
  products.insert(products.end(), a40, ProductId::kA100x40);
  while (static_cast<int>(products.size()) < node_count) {
    products.push_back(ProductId::kL40S);
  }
  products.resize(node_count);
  rng.Shuffle(products);
  fleet.nodes.resize(node_count);
  for (int i = 0; i < node_count; ++i) {
    Node& node = fleet.nodes[i];
    node.name = absl::StrFormat("gpu-node-%05d", i);
    node.uid = rng.Uuid();
    node.product = products[i];
    node.slice_name = absl::StrCat(node.name, "-", kDriverName, "-", rng.NameSuffix(5));
    node.slice_uid = rng.Uuid();
    node.first_gpu = i * kGpusPerNode;
    node.internal_ip = absl::StrFormat("10.%d.%d.%d", 16 + (i >> 16), (i >> 8) & 255, i & 255);
  }
  std::vector<int> order(node_count);
  for (int i = 0; i < node_count; ++i) {
    order[i] = i;
  }
  rng.Shuffle(order);
  int not_ready = std::max(1, Round(0.01 * node_count));
  int gone = std::max(1, Round(0.005 * node_count));
  for (int i : order) {
    Node& node = fleet.nodes[i];
    if (node.product == ProductId::kB200) {
      continue;
    }
    if (not_ready > 0) {
      node.ready = false;
      --not_ready;
    } else if (gone > 0) {
      node.exists = false;
      --gone;
    }
  }

  // GPUs.
  fleet.gpus.resize(static_cast<size_t>(node_count) * kGpusPerNode);
  for (int i = 0; i < node_count; ++i) {
    for (int m = 0; m < kGpusPerNode; ++m) {
      Gpu& gpu = fleet.gpus[i * kGpusPerNode + m];
      gpu.node = i;
      gpu.minor = m;
      gpu.uuid = absl::StrCat("GPU-", rng.Uuid());
      gpu.pci_bus_id = absl::StrFormat("0000:%02x:00.0", kBusIds[m]);
      gpu.numa_node = m < kGpusPerNode / 2 ? 0 : 1;
      if (fleet.nodes[i].product == ProductId::kB200) {
        gpu.maintenance_taint = true;
      } else {
        const double u = rng.Unit();
        gpu.xid_taint = u < 0.01;
        gpu.info_taint = u >= 0.01 && u < 0.015;
      }
    }
  }

  // Which GPUs are held: every H100 on an existing node, then A100/L40S GPUs at random.
  const int in_use = Round(0.70 * n);
  const int reserved = Round(0.05 * n);
  const int allocated_only = Round(0.05 * n);
  const int held = in_use + reserved + allocated_only;
  const int pending = n - held;
  std::vector<int> held_gpus;
  std::vector<int> others;
  for (int g = 0; g < static_cast<int>(fleet.gpus.size()); ++g) {
    const Node& node = fleet.nodes[fleet.gpus[g].node];
    if (!node.exists || node.product == ProductId::kB200) {
      continue;
    }
    (node.product == ProductId::kH100 ? held_gpus : others).push_back(g);
  }
  rng.Shuffle(held_gpus);
  if (static_cast<int>(held_gpus.size()) > held) {
    held_gpus.resize(held);
  }
  rng.Shuffle(others);
  for (int g : others) {
    if (static_cast<int>(held_gpus.size()) >= held) {
      break;
    }
    held_gpus.push_back(g);
  }
  rng.Shuffle(held_gpus);

  auto new_claim = [&](absl::Time created) -> int {
    const int index = static_cast<int>(fleet.claims.size());
    Claim claim;
    Pod pod;
    pod.ns = fleet.namespaces[rng.Below(fleet.namespaces.size())];
    pod.job = absl::StrFormat("%s-%06d", kWorkloads[rng.Below(5)], index);
    pod.name = absl::StrCat(pod.job, "-", rng.NameSuffix(5));
    pod.uid = rng.Uuid();
    pod.claim = index;
    pod.created = created - absl::Seconds(1);
    claim.ns = pod.ns;
    claim.name = absl::StrCat(pod.name, "-gpu-", rng.NameSuffix(5));
    claim.uid = rng.Uuid();
    claim.created = created;
    claim.pod = static_cast<int>(fleet.pods.size());
    fleet.claims.push_back(std::move(claim));
    fleet.pods.push_back(std::move(pod));
    return index;
  };

  // Claims in random order of kind, so that name order says nothing about state. A slot is
  // a held GPU (its rank decides in use / reserved / allocated) or a pending claim (its rank
  // decides the reason it is meant to have).
  struct Slot {
    int gpu = -1;
    int rank = 0;
  };
  std::vector<Slot> slots;
  for (size_t i = 0; i < held_gpus.size(); ++i) {
    slots.push_back({held_gpus[i], static_cast<int>(i)});
  }
  for (int i = 0; i < pending; ++i) {
    slots.push_back({-1, i});
  }
  rng.Shuffle(slots);

  // Pending claims: the first claim of each class with room is the oldest by far (stuck for
  // four days), so that a claim released later never becomes the longest-pending one.
  const int waiting = Round(0.5 * pending);
  const int no_capacity = Round(0.3 * pending);
  const int unsatisfiable = Round(0.1 * pending);
  bool first_of_class[kClassCount] = {true, true, true, true};
  const absl::Time epoch = options.epoch;
  for (const Slot& slot : slots) {
    if (slot.gpu < 0) {
      Request request;
      absl::Time created = epoch - absl::Minutes(1) - absl::Seconds(rng.Below(72 * 3600));
      const int i = slot.rank;
      if (i < waiting) {
        const double u = rng.Unit();
        request.device_class = u < 0.5 ? kClassGpu : (u < 0.75 ? kClassAmpere : kClassLargeMemory);
        if (first_of_class[request.device_class]) {
          first_of_class[request.device_class] = false;
          created = epoch - absl::Hours(96) - absl::Minutes(request.device_class);
        }
      } else if (i < waiting + no_capacity) {
        request.device_class = kClassH100;
      } else if (i < waiting + no_capacity + unsatisfiable) {
        request.selector = kSelectorGb200;
      } else {
        request.selector = kSelectorB200;
      }
      const int c = new_claim(created);
      fleet.claims[c].request = request;
      continue;
    }
    const int g = slot.gpu;
    const absl::Time created = epoch - absl::Hours(1) - absl::Seconds(rng.Below(47 * 3600));
    const int c = new_claim(created);
    Claim& claim = fleet.claims[c];
    Pod& pod = fleet.pods[claim.pod];
    claim.request.device_class = ClassForHeld(fleet.ProductOfGpu(fleet.gpus[g]), rng);
    claim.gpus = {g};
    claim.allocated_at = created + absl::Seconds(1 + rng.Below(120));
    fleet.gpus[g].holder = c;
    if (slot.rank < in_use) {
      claim.reserved = true;
      pod.phase = PodPhase::kRunning;
      pod.node = fleet.gpus[g].node;
      pod.started = claim.allocated_at + absl::Seconds(5 + rng.Below(55));
      pod.pod_ip = absl::StrFormat("10.%d.%d.%d", 128 + (pod.node >> 8), pod.node & 255,
                                   2 + static_cast<int>(rng.Below(250)));
    } else if (slot.rank < in_use + reserved) {
      claim.reserved = true;
      pod.node = fleet.gpus[g].node;
    }
  }
  return fleet;
}

}  // namespace dralens::bench::scale
