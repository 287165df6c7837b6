#include "driver/discovery/nvml/nvml_library.h"

#include <dlfcn.h>

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dralens::driver::discovery::nvml {
namespace {

// One entry of the symbol table: the name, a fallback with the same semantics (none today), and
// where the address goes. The legacy unversioned entry points (nvmlEventSetWait,
// nvmlDeviceGetPciInfo_v2, nvmlDeviceGetGpuInstancePossiblePlacements, ...) take other structs or
// mean other things, so they are never used in place of the versioned ones: a library without
// those is refused, naming the driver branch that has them (docs/hardware.md).
struct Symbol {
  const char* name;
  const char* fallback;  // nullptr: none
  std::function<void(void*)> slot;
  bool optional;
};

// A setter that stores a dlsym address into a typed function-pointer member.
template <typename Fn>
std::function<void(void*)> Slot(Fn* fn) {
  return [fn](void* address) { *fn = reinterpret_cast<Fn>(address); };
}

std::vector<Symbol> SymbolTable(NvmlApi& a) {
  return {
      {"nvmlInitWithFlags", nullptr, Slot(&a.InitWithFlags), false},
      {"nvmlShutdown", nullptr, Slot(&a.Shutdown), false},
      {"nvmlSystemGetDriverVersion", nullptr, Slot(&a.SystemGetDriverVersion), false},
      {"nvmlSystemGetCudaDriverVersion", nullptr, Slot(&a.SystemGetCudaDriverVersion), false},
      {"nvmlDeviceGetCount_v2", nullptr, Slot(&a.DeviceGetCount), false},
      {"nvmlDeviceGetHandleByIndex_v2", nullptr, Slot(&a.DeviceGetHandleByIndex), false},
      {"nvmlDeviceGetHandleByUUID", nullptr, Slot(&a.DeviceGetHandleByUUID), false},
      {"nvmlDeviceGetMinorNumber", nullptr, Slot(&a.DeviceGetMinorNumber), false},
      {"nvmlDeviceGetIndex", nullptr, Slot(&a.DeviceGetIndex), false},
      {"nvmlDeviceGetUUID", nullptr, Slot(&a.DeviceGetUUID), false},
      {"nvmlDeviceGetName", nullptr, Slot(&a.DeviceGetName), false},
      {"nvmlDeviceGetBrand", nullptr, Slot(&a.DeviceGetBrand), false},
      {"nvmlDeviceGetArchitecture", nullptr, Slot(&a.DeviceGetArchitecture), false},
      {"nvmlDeviceGetCudaComputeCapability", nullptr, Slot(&a.DeviceGetCudaComputeCapability),
       false},
      {"nvmlDeviceGetMemoryInfo", nullptr, Slot(&a.DeviceGetMemoryInfo), false},
      {"nvmlDeviceGetPciInfo_v3", nullptr, Slot(&a.DeviceGetPciInfo), false},
      {"nvmlDeviceGetNumaNodeId", nullptr, Slot(&a.DeviceGetNumaNodeId), true},
      {"nvmlDeviceGetMigMode", nullptr, Slot(&a.DeviceGetMigMode), false},
      {"nvmlDeviceSetMigMode", nullptr, Slot(&a.DeviceSetMigMode), false},
      {"nvmlDeviceGetGpuInstanceProfileInfo", nullptr, Slot(&a.DeviceGetGpuInstanceProfileInfo),
       false},
      {"nvmlDeviceGetGpuInstancePossiblePlacements_v2", nullptr,
       Slot(&a.DeviceGetGpuInstancePossiblePlacements), false},
      {"nvmlDeviceCreateGpuInstanceWithPlacement", nullptr,
       Slot(&a.DeviceCreateGpuInstanceWithPlacement), false},
      {"nvmlGpuInstanceDestroy", nullptr, Slot(&a.GpuInstanceDestroy), false},
      {"nvmlDeviceGetGpuInstanceById", nullptr, Slot(&a.DeviceGetGpuInstanceById), false},
      {"nvmlGpuInstanceGetInfo", nullptr, Slot(&a.GpuInstanceGetInfo), false},
      {"nvmlGpuInstanceGetComputeInstanceProfileInfo", nullptr,
       Slot(&a.GpuInstanceGetComputeInstanceProfileInfo), false},
      {"nvmlGpuInstanceCreateComputeInstance", nullptr, Slot(&a.GpuInstanceCreateComputeInstance),
       false},
      {"nvmlComputeInstanceDestroy", nullptr, Slot(&a.ComputeInstanceDestroy), false},
      {"nvmlGpuInstanceGetComputeInstanceById", nullptr, Slot(&a.GpuInstanceGetComputeInstanceById),
       false},
      {"nvmlComputeInstanceGetInfo_v2", nullptr, Slot(&a.ComputeInstanceGetInfo), false},
      {"nvmlDeviceGetGpuInstanceId", nullptr, Slot(&a.DeviceGetGpuInstanceId), false},
      {"nvmlDeviceGetComputeInstanceId", nullptr, Slot(&a.DeviceGetComputeInstanceId), false},
      {"nvmlDeviceGetMaxMigDeviceCount", nullptr, Slot(&a.DeviceGetMaxMigDeviceCount), false},
      {"nvmlDeviceGetMigDeviceHandleByIndex", nullptr, Slot(&a.DeviceGetMigDeviceHandleByIndex),
       false},
      {"nvmlDeviceGetDeviceHandleFromMigDeviceHandle", nullptr,
       Slot(&a.DeviceGetDeviceHandleFromMigDeviceHandle), false},
      {"nvmlEventSetCreate", nullptr, Slot(&a.EventSetCreate), false},
      {"nvmlDeviceGetSupportedEventTypes", nullptr, Slot(&a.DeviceGetSupportedEventTypes), false},
      {"nvmlDeviceRegisterEvents", nullptr, Slot(&a.DeviceRegisterEvents), false},
      {"nvmlEventSetWait_v2", nullptr, Slot(&a.EventSetWait), false},
      {"nvmlEventSetFree", nullptr, Slot(&a.EventSetFree), false},
      {"nvmlDeviceGetUtilizationRates", nullptr, Slot(&a.DeviceGetUtilizationRates), true},
      {"nvmlGpmQueryDeviceSupport", nullptr, Slot(&a.GpmQueryDeviceSupport), true},
      {"nvmlGpmSampleAlloc", nullptr, Slot(&a.GpmSampleAlloc), true},
      {"nvmlGpmSampleFree", nullptr, Slot(&a.GpmSampleFree), true},
      {"nvmlGpmMigSampleGet", nullptr, Slot(&a.GpmMigSampleGet), true},
      {"nvmlGpmMetricsGet", nullptr, Slot(&a.GpmMetricsGet), true},
      {"nvmlDeviceGetNvLinkState", nullptr, Slot(&a.DeviceGetNvLinkState), true},
      {"nvmlDeviceGetNvLinkRemotePciInfo_v2", nullptr, Slot(&a.DeviceGetNvLinkRemotePciInfo), true},
      {"nvmlDeviceGetGpuFabricInfoV", nullptr, Slot(&a.DeviceGetGpuFabricInfoV), true},
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Load(absl::string_view path) {
  const std::string file(path);
  dlerror();  // clear
  void* handle = dlopen(file.c_str(), RTLD_LAZY | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::NotFoundError(
        absl::StrCat("load NVML library ", file, ": ", err != nullptr ? err : "dlopen failed"));
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary(file, handle));
  for (const Symbol& symbol : SymbolTable(lib->api_)) {
    void* address = dlsym(handle, symbol.name);
    if (address == nullptr && symbol.fallback != nullptr) {
      address = dlsym(handle, symbol.fallback);
    }
    if (address == nullptr && !symbol.optional) {
      return absl::FailedPreconditionError(absl::StrCat(
          "NVML library ", file, ": missing symbol ", symbol.name,
          symbol.fallback != nullptr ? absl::StrCat(" (or ", symbol.fallback, ")") : "",
          "; dralens needs NVIDIA driver ", kMinimumDriver, " or later"));
    }
    symbol.slot(address);
  }
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ != nullptr) {
    dlclose(handle_);
  }
}

std::vector<std::string> NvmlLibrary::RequiredSymbols() {
  NvmlApi scratch;
  std::vector<std::string> names;
  for (const Symbol& symbol : SymbolTable(scratch)) {
    if (!symbol.optional) {
      names.emplace_back(symbol.name);
    }
  }
  return names;
}

}  // namespace dralens::driver::discovery::nvml
