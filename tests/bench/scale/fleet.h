// Fleet: the generated cluster of the scale benchmark, as plain values.
//
// N claims on ceil(N/8) nodes x 8 full GPUs (no MIG), one pod per claim, 4 overlapping
// DeviceClasses, following the fleet description at the end of CLUSTER-SPEC.md:
//   - nodes by product: 30 % H100, 20 % A100 80GB, 15 % A100 40GB, 2 % B200 (at least one),
//     the rest L40S; 1 % NotReady and 0.5 % gone (slices published, Node object deleted), at
//     least one of each;
//   - every GPU of a B200 node carries a NoExecute maintenance taint (a pool being burned in);
//     1 % of the other GPUs an XID NoSchedule taint, 0.5 % an informational taint (effect None);
//   - claims: 80 % allocated (every H100 outside gone nodes is held, so H100 claims cannot be
//     placed), of which 70 % of N in use (pod Running), 5 % reserved for a Pending pod and 5 %
//     allocated without a reservation; 20 % pending: half with room to run (waiting for their
//     pod), 30 % asking for an H100 (no capacity), 10 % for a product no node has
//     (unsatisfiable) and 10 % for a B200 (every one tainted).
// Everything is drawn from one seed, so the API-server process and the benchmark driver that
// generate the same (claims, seed, epoch) get identical fleets.
//
// A Fleet is also the benchmark's model of the cluster: watch events mutate it (events.h) and
// the truth (truth.h) is derived from it. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dralens::bench::scale {

inline constexpr char kDriverName[] = "gpu.dralens.dev";
inline constexpr int kGpusPerNode = 8;

enum class ProductId { kH100, kA100x80, kA100x40, kL40S, kB200 };
inline constexpr int kProductCount = 5;

struct Product {
  const char* product_name;  // the productName attribute, e.g. "NVIDIA H100 80GB HBM3"
  const char* architecture;
  int cuda_major;
  int cuda_minor;
  uint64_t memory_mib;  // what NVML reports as total memory
  const char* instance_type;
};
const Product& ProductOf(ProductId id);

// The four DeviceClasses: CEL for the API objects, and the same predicate in C++ for the truth.
struct ClassDef {
  const char* name;
  const char* cel;
  bool (*matches)(ProductId product);
};
inline constexpr int kClassCount = 4;
inline constexpr int kClassGpu = 0;          // every GPU of the driver
inline constexpr int kClassH100 = 1;         // productName == H100
inline constexpr int kClassLargeMemory = 2;  // memory >= 64Gi
inline constexpr int kClassAmpere = 3;       // architecture == Ampere
const ClassDef& ClassAt(int index);

// Extra request selectors (beyond the class).
struct SelectorDef {
  const char* cel;
  bool (*matches)(ProductId product);
};
inline constexpr int kNoSelector = -1;
inline constexpr int kSelectorGb200 = 0;  // a product no node has
inline constexpr int kSelectorB200 = 1;
const SelectorDef& SelectorAt(int index);

struct Gpu {
  int node = 0;
  int minor = 0;
  std::string uuid;
  std::string pci_bus_id;
  int numa_node = 0;
  bool maintenance_taint = false;  // NoExecute (B200 pools)
  bool xid_taint = false;          // NoSchedule
  bool info_taint = false;         // effect None: never makes a GPU unavailable
  int holder = -1;                 // claim index allocated this GPU, -1 when none
};

struct Node {
  std::string name;
  std::string uid;
  ProductId product = ProductId::kL40S;
  bool ready = true;
  bool exists = true;  // false: the Node object is gone, its slice remains
  std::string slice_name;
  std::string slice_uid;
  int64_t pool_generation = 1;
  int first_gpu = 0;
  std::string internal_ip;
};

struct Request {
  int device_class = kClassGpu;
  int selector = kNoSelector;
  int count = 1;
};

enum class PodPhase { kPending, kRunning, kSucceeded };

struct Pod {
  std::string ns, name, uid;
  std::string job;  // owning Job name
  int claim = -1;
  bool exists = true;
  PodPhase phase = PodPhase::kPending;
  int node = -1;  // -1: not scheduled
  absl::Time created;
  absl::Time started;
  int incarnation = 0;  // bumped when the pod is re-created
  std::string pod_ip;
};

enum class ClaimState { kPending, kAllocated, kReserved, kInUse };
const char* ToString(ClaimState state);

struct Claim {
  std::string ns, name, uid;
  Request request;
  absl::Time created;
  std::vector<int> gpus;  // allocated GPUs; empty: pending
  absl::Time allocated_at;
  bool reserved = false;  // status.reservedFor names the pod
  int pod = -1;
};

struct FleetOptions {
  int claims = 1000;
  uint64_t seed = 1;
  // creationTimestamps are drawn before this instant; both processes must pass the same one.
  absl::Time epoch = absl::FromUnixSeconds(1795564800);  // 2026-11-25T00:00:00Z
};

struct Fleet {
  FleetOptions options;
  std::vector<Node> nodes;
  std::vector<Gpu> gpus;
  std::vector<Claim> claims;
  std::vector<Pod> pods;
  std::vector<std::string> namespaces;

  ClaimState StateOf(const Claim& claim) const;
  ClaimState StateOf(int claim) const { return StateOf(claims[claim]); }
  // NoSchedule/NoExecute taint, or the node NotReady or gone.
  bool Unavailable(const Gpu& gpu) const;
  ProductId ProductOfGpu(const Gpu& gpu) const { return nodes[gpu.node].product; }
  bool Matches(const Request& request, const Gpu& gpu) const;
  const Product& ProductOfGpuInfo(const Gpu& gpu) const { return ProductOf(ProductOfGpu(gpu)); }
  std::string DeviceName(const Gpu& gpu) const;
};

// Deterministic in `options`.
Fleet Generate(const FleetOptions& options);

// RFC 3339 with seconds, as the API server writes timestamps.
std::string Rfc3339(absl::Time t);

// A small deterministic generator (splitmix64), so that both processes draw the same numbers
// whatever the standard library's distributions do.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, n); n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }
  double Unit() { return static_cast<double>(Next() >> 11) / static_cast<double>(1ull << 53); }
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      std::swap(v[i - 1], v[Below(i)]);
    }
  }
  // A UUID-shaped string (version 4 layout).
  std::string Uuid();
  // `n` lower-case hex digits.
  std::string Hex(int n);
  // `n` characters of the API server's generateName alphabet.
  std::string NameSuffix(int n);

 private:
  uint64_t state_;
};

}  // namespace dralens::bench::scale
