// GpuDiscovery: the read-only view of the node's GPUs.
#pragma once

#include "absl/status/statusor.h"
#include "src/model/inventory.h"

namespace dralens::driver::discovery {

// Thread-safety: implementations are safe to call from several threads at once.
class GpuDiscovery {
 public:
  virtual ~GpuDiscovery() = default;

  // A fresh snapshot of the GPUs and existing MIG devices. Read-only: never changes any GPU
  // setting. A GPU that is lost, or that the process may not open (NVML_ERROR_NO_PERMISSION), is
  // left out and the others are returned.
  virtual absl::StatusOr<model::Inventory> Discover() = 0;
};

}  // namespace dralens::driver::discovery
