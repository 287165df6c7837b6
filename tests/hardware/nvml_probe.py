#!/usr/bin/env python3
"""What NVML itself says about this machine's GPUs, for comparison with what dralens publishes.

Runs on a GPU node (not in CI: no machine here has a GPU). It needs the NVIDIA driver's
libnvidia-ml.so.1 and the `pynvml` module (pip's nvidia-ml-py, or Debian's python3-pynvml).
Everything is read-only unless --mig-cycle is given; then, on a Hopper or later GPU whose MIG
mode is off, it turns MIG mode on, creates and destroys the smallest GPU and compute instance,
and turns MIG mode off again, checking that the GPU ends exactly as it started.

Each answer is printed as `gpu<i>.<what>: <value>` or `gpu<i>.<what>: ERROR <NVML name>`, so two
runs (or this and dralens' ResourceSlices) can be compared line by line.
"""

import argparse
import ctypes
import os
import sys

import pynvml as N


def err_name(e):
    for name in dir(N):
        if name.startswith("NVML_ERROR_") and getattr(N, name) == e.value:
            return name
    return f"NVML_ERROR({e.value})"


def show(key, fn, *args, fmt=lambda v: v):
    try:
        value = fn(*args)
    except N.NVMLError as e:
        print(f"{key}: ERROR {err_name(e)}")
        return None
    except AttributeError as e:
        print(f"{key}: MISSING {e}")
        return None
    print(f"{key}: {fmt(value)}")
    return value


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def symbols():
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    for name in ["nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                 "nvmlDeviceGetGpuInstancePossiblePlacements", "nvmlEventSetWait_v2",
                 "nvmlEventSetWait", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2",
                 "nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstanceProfileInfoByIdV",
                 "nvmlDeviceGetGpuFabricInfoV", "nvmlGpmQueryDeviceSupport",
                 "nvmlGpmMigSampleGet", "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                 "nvmlDeviceGetNumaNodeId", "nvmlComputeInstanceGetInfo_v2"]:
        print(f"symbol.{name}: {'yes' if hasattr(lib, name) else 'no'}")


def placements(h, profile_id):
    """nvmlDeviceGetGpuInstancePossiblePlacements_v2: count first, then the array."""
    count = ctypes.c_uint(0)
    N.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, None, ctypes.byref(count))
    array = (N.c_nvmlGpuInstancePlacement_t * count.value)()
    N.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, array, ctypes.byref(count))
    return list(array)[:count.value]


def gi_profiles(k, h):
    """GPU-instance profiles by index until NVML says the index is out of range."""
    found = []
    for index in range(0, 32):
        try:
            info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
        except N.NVMLError as e:
            print(f"{k}.gi_profile[{index}]: ERROR {err_name(e)}")
            if e.value == N.NVML_ERROR_INVALID_ARGUMENT:
                break
            continue
        print(f"{k}.gi_profile[{index}]: id={info.id} slices={info.sliceCount} "
              f"instances={info.instanceCount} sms={info.multiprocessorCount} "
              f"memMiB={info.memorySizeMB}")
        found.append(info)
        try:
            places = placements(h, info.id)
            print(f"{k}.gi_profile[{index}].placements: "
                  + " ".join(f"{p.start}+{p.size}" for p in places))
        except N.NVMLError as e:
            print(f"{k}.gi_profile[{index}].placements: ERROR {err_name(e)}")
    return found


def sysfs_numa(bus_id):
    bdf = bus_id.lower()
    if len(bdf.split(":")[0]) == 8:
        bdf = bdf[4:]
    path = f"/sys/bus/pci/devices/{bdf}/numa_node"
    try:
        with open(path) as f:
            return f"{f.read().strip()} ({path})"
    except OSError as e:
        return f"unreadable ({path}: {e.strerror})"


def device(i):
    k = f"gpu{i}"
    h = show(f"{k}.handle", N.nvmlDeviceGetHandleByIndex, i, fmt=lambda v: "ok")
    if h is None:
        return None, None
    show(f"{k}.name", N.nvmlDeviceGetName, h, fmt=text)
    show(f"{k}.uuid", N.nvmlDeviceGetUUID, h, fmt=text)
    show(f"{k}.architecture", N.nvmlDeviceGetArchitecture, h)
    show(f"{k}.cuda_cc", N.nvmlDeviceGetCudaComputeCapability, h)
    show(f"{k}.brand", N.nvmlDeviceGetBrand, h)
    show(f"{k}.minor", N.nvmlDeviceGetMinorNumber, h)
    mem = show(f"{k}.memory", N.nvmlDeviceGetMemoryInfo, h,
               fmt=lambda m: f"total={m.total} used={m.used} free={m.free}")
    pci = show(f"{k}.pci", N.nvmlDeviceGetPciInfo, h, fmt=lambda p: text(p.busId))
    if pci is not None:
        print(f"{k}.sysfs_numa_node: {sysfs_numa(text(pci.busId))}")
    if hasattr(N, "nvmlDeviceGetNumaNodeId"):
        show(f"{k}.nvml_numa_node", N.nvmlDeviceGetNumaNodeId, h)
    show(f"{k}.virtualization_mode", N.nvmlDeviceGetVirtualizationMode, h)
    show(f"{k}.compute_mode", N.nvmlDeviceGetComputeMode, h)
    mig = show(f"{k}.mig_mode", N.nvmlDeviceGetMigMode, h)
    show(f"{k}.max_mig_devices", N.nvmlDeviceGetMaxMigDeviceCount, h)
    show(f"{k}.utilization", N.nvmlDeviceGetUtilizationRates, h,
         fmt=lambda u: f"gpu={u.gpu}% memory={u.memory}%")
    if hasattr(N, "nvmlGpmQueryDeviceSupport"):
        show(f"{k}.gpm_supported", N.nvmlGpmQueryDeviceSupport, h,
             fmt=lambda s: s.isSupportedDevice)
    if hasattr(N, "nvmlDeviceGetGpuFabricInfoV"):
        def fabric(dev):
            info = N.c_nvmlGpuFabricInfoV_t()
            info.version = N.nvmlGpuFabricInfo_v2
            N.nvmlDeviceGetGpuFabricInfoV(dev, ctypes.byref(info))
            return (f"state={info.state} status={info.status} clique={info.cliqueId} "
                    f"cluster={bytes(info.clusterUuid).hex()}")
        show(f"{k}.fabric", fabric, h)
    for link in range(0, getattr(N, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = N.nvmlDeviceGetNvLinkState(h, link)
        except N.NVMLError as e:
            print(f"{k}.nvlink[{link}]: ERROR {err_name(e)}")
            break
        peer = "-"
        if active:
            try:
                peer = text(N.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
            except N.NVMLError as e:
                peer = f"ERROR {err_name(e)}"
        print(f"{k}.nvlink[{link}]: active={active} peer={peer}")
    show(f"{k}.supported_events", N.nvmlDeviceGetSupportedEventTypes, h, fmt=hex)
    profiles = gi_profiles(k, h)
    return h, (mig, profiles, mem)


def events(handles):
    s = N.nvmlEventSetCreate()
    for i, h in handles:
        try:
            mask = N.nvmlDeviceGetSupportedEventTypes(h)
            N.nvmlDeviceRegisterEvents(h, mask, s)
            print(f"gpu{i}.register_events: ok mask={hex(mask)}")
        except N.NVMLError as e:
            print(f"gpu{i}.register_events: ERROR {err_name(e)}")
    try:
        data = N.nvmlEventSetWait(s, 200)
        print(f"events.wait: event type={hex(data.eventType)} data={data.eventData}")
    except N.NVMLError as e:
        print(f"events.wait(200ms): {err_name(e)}")
    N.nvmlEventSetFree(s)


def mig_cycle(i, h, profiles):
    """MIG on, smallest GI + CI, MIG UUID, destroy, MIG off; restores the start state."""
    k = f"gpu{i}.mig_cycle"
    cur, pend = N.nvmlDeviceGetMigMode(h)
    arch = N.nvmlDeviceGetArchitecture(h)
    if cur != 0 or pend != 0:
        print(f"{k}: skipped (MIG mode already {cur}/{pend})")
        return
    if arch < N.NVML_DEVICE_ARCH_HOPPER:
        print(f"{k}: skipped (architecture {arch} needs a reset to change MIG mode)")
        return
    try:
        status = N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE)
        print(f"{k}.enable: activation={status}")
        print(f"{k}.mode_after_enable: {N.nvmlDeviceGetMigMode(h)}")
        if N.nvmlDeviceGetMigMode(h)[0] != 1:
            return
        smallest = N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
        print(f"{k}.profile_1_slice_with_mig_on: id={smallest.id} memMiB={smallest.memorySizeMB}")
        place = placements(h, smallest.id)[0]
        gi = N.nvmlDeviceCreateGpuInstanceWithPlacement(h, smallest.id, ctypes.byref(place))
        gii = N.nvmlGpuInstanceGetInfo(gi)
        print(f"{k}.gi: id={gii.id} profileId={gii.profileId} "
              f"placement={gii.placement.start}+{gii.placement.size}")
        for ci_index in range(0, 8):
            try:
                cp = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_index, 0)
                print(f"{k}.ci_profile[{ci_index}]: id={cp.id} slices={cp.sliceCount}")
            except N.NVMLError as e:
                print(f"{k}.ci_profile[{ci_index}]: ERROR {err_name(e)}")
        cp = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0)
        ci = N.nvmlGpuInstanceCreateComputeInstance(gi, cp.id)
        cii = N.nvmlComputeInstanceGetInfo(ci)
        try:
            print(f"{k}.ci_info_device_uuid: {text(N.nvmlDeviceGetUUID(cii.device))}")
        except N.NVMLError as e:
            print(f"{k}.ci_info_device_uuid: ERROR {err_name(e)}")
        for m in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mh = N.nvmlDeviceGetMigDeviceHandleByIndex(h, m)
                print(f"{k}.mig_device[{m}]: {text(N.nvmlDeviceGetUUID(mh))} "
                      f"gi={N.nvmlDeviceGetGpuInstanceId(mh)} ci={N.nvmlDeviceGetComputeInstanceId(mh)}")
                show(f"{k}.mig_device[{m}].memory", N.nvmlDeviceGetMemoryInfo, mh,
                     fmt=lambda v: f"total={v.total} used={v.used}")
                show(f"{k}.mig_device[{m}].utilization", N.nvmlDeviceGetUtilizationRates, mh,
                     fmt=lambda u: f"gpu={u.gpu}%")
            except N.NVMLError as e:
                print(f"{k}.mig_device[{m}]: ERROR {err_name(e)}")
        show(f"{k}.parent_utilization_mig_on", N.nvmlDeviceGetUtilizationRates, h,
             fmt=lambda u: f"gpu={u.gpu}%")
        show(f"{k}.parent_compute_mode_mig_on", N.nvmlDeviceGetComputeMode, h)
        show(f"{k}.gi_by_id", N.nvmlDeviceGetGpuInstanceById, h, gii.id, fmt=lambda v: "ok")
        N.nvmlComputeInstanceDestroy(ci)
        N.nvmlGpuInstanceDestroy(gi)
        print(f"{k}.destroyed: ok")
        show(f"{k}.gi_by_id_after_destroy", N.nvmlDeviceGetGpuInstanceById, h, gii.id,
             fmt=lambda v: "ok")
    except N.NVMLError as e:
        print(f"{k}: ERROR {err_name(e)}")
    finally:
        try:
            status = N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_DISABLE)
            print(f"{k}.disable: activation={status}")
        except N.NVMLError as e:
            print(f"{k}.disable: ERROR {err_name(e)}")
        show(f"{k}.mode_at_end", N.nvmlDeviceGetMigMode, h)
        show(f"{k}.gi_by_id_mig_off", N.nvmlDeviceGetGpuInstanceById, h, 1, fmt=lambda v: "ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mig-cycle", action="store_true",
                        help="turn MIG on and off on each Hopper+ GPU whose MIG mode is off")
    args = parser.parse_args()
    N.nvmlInitWithFlags(1)
    show("driver_version", N.nvmlSystemGetDriverVersion, fmt=text)
    show("nvml_version", N.nvmlSystemGetNVMLVersion, fmt=text)
    show("cuda_driver_version", N.nvmlSystemGetCudaDriverVersion)
    symbols()
    count = show("device_count", N.nvmlDeviceGetCount) or 0
    handles = []
    details = {}
    for i in range(count):
        h, d = device(i)
        if h is not None:
            handles.append((i, h))
            details[i] = d
    events(handles)
    if args.mig_cycle:
        for i, h in handles:
            mig_cycle(i, h, details[i][1])
    N.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
