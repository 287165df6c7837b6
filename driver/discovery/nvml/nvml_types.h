// The subset of the NVML C ABI that dralens uses, declared from reference/nvml-and-mig.md §3–4
// (nvml.h of NVML API 12/13; layouts for LP64 Linux). No nvml.h is needed to build: the library
// is loaded at run time with dlopen and every function is resolved with dlsym.
//
// This header has no dependencies beyond the C++ standard library so that the fake
// libnvidia-ml used by tests can implement the same ABI from it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dralens::driver::discovery::nvml {

// nvmlReturn_t is a C enum (4 bytes). Kept as a plain int alias so unknown values survive.
using nvmlReturn_t = int;

enum NvmlReturnCode : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
  NVML_ERROR_UNKNOWN = 999,
};

// Opaque handles.
struct nvmlDevice_st;
struct nvmlGpuInstance_st;
struct nvmlComputeInstance_st;
struct nvmlEventSet_st;
struct nvmlGpmSample_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;
using nvmlEventSet_t = nvmlEventSet_st*;
using nvmlGpmSample_t = nvmlGpmSample_st*;

// Constants (§3, §4.4, §4.6, §1.6).
inline constexpr unsigned int NVML_INIT_FLAG_NO_GPUS = 1;
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0;
inline constexpr unsigned int NVML_COMPUTEMODE_DEFAULT = 0;
inline constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
inline constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
inline constexpr unsigned long long nvmlEventMigConfigChange = 0x100ULL;
// 12.9 and 13.x headers only; older drivers do not list them as supported.
inline constexpr unsigned long long nvmlEventTypeGpuUnavailableError = 0x4000ULL;
inline constexpr unsigned long long nvmlEventTypeGpuRecoveryAction = 0x8000ULL;
inline constexpr unsigned int kNvmlNoInstanceId = 0xFFFFFFFFu;

// nvmlMemory_t (v1).
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// What nvmlDeviceGetPciInfo_v3 fills.
struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};
using nvmlComputeInstancePlacement_t = nvmlGpuInstancePlacement_t;

// nvmlGpuInstanceProfileInfo_t (v1, what nvmlDeviceGetGpuInstanceProfileInfo fills).
struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};

// nvmlComputeInstanceProfileInfo_t (v1).
struct nvmlComputeInstanceProfileInfo_t {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};

struct nvmlComputeInstanceInfo_t {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
};

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// NVLink (nvml.h "NvLink"): per link, nvmlDeviceGetNvLinkState says whether it is up and
// nvmlDeviceGetNvLinkRemotePciInfo_v2 fills an nvmlPciInfo_t for its far end (pciSubSystemId
// is not filled).
inline constexpr unsigned int NVML_NVLINK_MAX_LINKS = 18;
// nvmlEnableState_t is a C enum (4 bytes).
using nvmlEnableState_t = int;
inline constexpr nvmlEnableState_t NVML_FEATURE_DISABLED = 0;
inline constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;

// GPU fabric (multi-node NVLink) registration, nvmlDeviceGetGpuFabricInfoV (R550+).
inline constexpr unsigned int NVML_GPU_FABRIC_UUID_LEN = 16;
using nvmlGpuFabricState_t = unsigned char;
inline constexpr nvmlGpuFabricState_t NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0;
inline constexpr nvmlGpuFabricState_t NVML_GPU_FABRIC_STATE_NOT_STARTED = 1;
inline constexpr nvmlGpuFabricState_t NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2;
inline constexpr nvmlGpuFabricState_t NVML_GPU_FABRIC_STATE_COMPLETED = 3;

// nvmlGpuFabricInfo_v2_t. `status` is meaningful only once `state` is COMPLETED. Later headers
// alias nvmlGpuFabricInfoV_t to a v3 that appends healthSummary; the library still accepts v2.
struct nvmlGpuFabricInfo_v2_t {
  unsigned int version;
  unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
  nvmlReturn_t status;
  unsigned int cliqueId;
  nvmlGpuFabricState_t state;
  unsigned int healthMask;
};
// NVML_STRUCT_VERSION(GpuFabricInfo, 2): the size, with the version in the top byte.
inline constexpr unsigned int nvmlGpuFabricInfo_v2 =
    static_cast<unsigned int>(sizeof(nvmlGpuFabricInfo_v2_t)) | (2u << 24);

// nvmlUtilization_t: percentages of the last sample period.
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

// GPU Performance Monitoring (nvml.h "GPM", R520+).
inline constexpr unsigned int NVML_GPM_SUPPORT_VERSION = 1;
inline constexpr unsigned int NVML_GPM_METRICS_GET_VERSION = 1;
// Percentage of time any compute or graphics context was active, 0.0-100.0.
inline constexpr unsigned int NVML_GPM_METRIC_GRAPHICS_UTIL = 1;

struct nvmlGpmSupport_t {
  unsigned int version;
  unsigned int isSupportedDevice;
};

struct nvmlGpmMetric_t {
  unsigned int metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;
};

// nvmlGpmMetricsGet_t with room for `N` metrics. The library reads `numMetrics` entries and
// headers differ in their array's length (NVML_GPM_METRIC_MAX grew from 98 to 333), so the
// caller's array need only hold the metrics it asks for; the head is the same in all of them.
template <unsigned int N>
struct nvmlGpmMetricsGetN_t {
  unsigned int version;
  unsigned int numMetrics;
  nvmlGpmSample_t sample1;
  nvmlGpmSample_t sample2;
  nvmlGpmMetric_t metrics[N];
};
using nvmlGpmMetricsGet1_t = nvmlGpmMetricsGetN_t<1>;

// The layouts are part of the ABI: pin them to the reference (§4.2).
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(offsetof(nvmlPciInfo_t, domain) == 16);
static_assert(offsetof(nvmlPciInfo_t, pciDeviceId) == 28);
static_assert(offsetof(nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(nvmlGpuInstancePlacement_t) == 8);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB) == 40);
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24);
static_assert(offsetof(nvmlGpuInstanceInfo_t, id) == 8);
static_assert(offsetof(nvmlGpuInstanceInfo_t, placement) == 16);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36);
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32);
static_assert(offsetof(nvmlComputeInstanceInfo_t, id) == 16);
static_assert(offsetof(nvmlComputeInstanceInfo_t, placement) == 24);
static_assert(sizeof(nvmlEventData_t) == 32);
static_assert(offsetof(nvmlEventData_t, eventData) == 16);
static_assert(offsetof(nvmlEventData_t, computeInstanceId) == 28);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36);
static_assert(offsetof(nvmlGpuFabricInfo_v2_t, status) == 20);
static_assert(offsetof(nvmlGpuFabricInfo_v2_t, cliqueId) == 24);
static_assert(offsetof(nvmlGpuFabricInfo_v2_t, state) == 28);
static_assert(offsetof(nvmlGpuFabricInfo_v2_t, healthMask) == 32);
static_assert(nvmlGpuFabricInfo_v2 == 0x02000024);
static_assert(sizeof(nvmlGpmSupport_t) == 8);
static_assert(sizeof(nvmlGpmMetric_t) == 40);
static_assert(offsetof(nvmlGpmMetric_t, value) == 8);
static_assert(offsetof(nvmlGpmMetricsGet1_t, sample1) == 8);
static_assert(offsetof(nvmlGpmMetricsGet1_t, metrics) == 24);

}  // namespace dralens::driver::discovery::nvml
