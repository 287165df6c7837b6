// The test side of the fake libnvidia-ml.so.1 (fake_nvml/): its control entry points, reached
// through dlopen of the same file, and a fixture with a scratch sysfs tree.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "driver/discovery/nvml/nvml_device_source.h"
#include "gtest/gtest.h"

namespace dralens::driver::discovery::testing {

// Control entry points of the fake library.
class FakeNvml {
 public:
  FakeNvml() : handle_(dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL)) {
    EXPECT_NE(handle_, nullptr) << dlerror();
  }
  ~FakeNvml() {
    if (handle_ != nullptr) {
      dlclose(handle_);
    }
  }
  void Reset() { Fn<void (*)()>("fakeNvmlReset")(); }
  int InitCount() { return Fn<int (*)()>("fakeNvmlInitCount")(); }
  int MutationCount() { return Fn<int (*)()>("fakeNvmlMutationCount")(); }
  void PushXid(unsigned gpu, unsigned long long xid, unsigned gi, unsigned ci) {
    Fn<void (*)(unsigned, unsigned long long, unsigned, unsigned)>("fakeNvmlPushXid")(gpu, xid, gi,
                                                                                      ci);
  }
  void SetGpuLost(unsigned gpu, bool lost) {
    Fn<void (*)(unsigned, int)>("fakeNvmlSetGpuLost")(gpu, lost ? 1 : 0);
  }
  void SetMigSupported(unsigned gpu, bool supported) {
    Fn<void (*)(unsigned, int)>("fakeNvmlSetMigSupported")(gpu, supported ? 1 : 0);
  }
  void PushEvent(unsigned gpu, unsigned long long type, unsigned long long data) {
    Fn<void (*)(unsigned, unsigned long long, unsigned long long)>("fakeNvmlPushEvent")(gpu, type,
                                                                                        data);
  }
  void SetDenied(unsigned gpu, bool denied) {
    Fn<void (*)(unsigned, int)>("fakeNvmlSetDenied")(gpu, denied ? 1 : 0);
  }
  void SetMigCapability(bool granted) {
    Fn<void (*)(int)>("fakeNvmlSetMigCapability")(granted ? 1 : 0);
  }
  void SetProfileIndexLimit(unsigned limit) {
    Fn<void (*)(unsigned)>("fakeNvmlSetProfileIndexLimit")(limit);
  }
  void SwapCiProfileIds(bool swapped) {
    Fn<void (*)(int)>("fakeNvmlSwapCiProfileIds")(swapped ? 1 : 0);
  }
  void SetSupportedEvents(unsigned gpu, unsigned long long types) {
    Fn<void (*)(unsigned, unsigned long long)>("fakeNvmlSetSupportedEvents")(gpu, types);
  }
  void FailNextWait(int rc) { Fn<void (*)(int)>("fakeNvmlFailNextWait")(rc); }
  int EventSetsCreated() { return Fn<int (*)()>("fakeNvmlEventSetsCreated")(); }
  int EventSetsAlive() { return Fn<int (*)()>("fakeNvmlEventSetsAlive")(); }
  // Utilisation and memory used of GPU `gpu` (gi ~0u) or of its GPU instance `gi`.
  void SetUsage(unsigned gpu, unsigned gi, unsigned util_percent, unsigned long long used_mib) {
    Fn<void (*)(unsigned, unsigned, unsigned, unsigned long long)>("fakeNvmlSetUsage")(
        gpu, gi, util_percent, used_mib);
  }
  void SetGpmSupported(unsigned gpu, bool supported) {
    Fn<void (*)(unsigned, int)>("fakeNvmlSetGpmSupported")(gpu, supported ? 1 : 0);
  }
  int GpmSamplesAlive() { return Fn<int (*)()>("fakeNvmlGpmSamplesAlive")(); }
  // GPUs 2 to count-1 become full H100s (count 2 to 8).
  void SetGpuCount(unsigned count) { Fn<void (*)(unsigned)>("fakeNvmlSetGpuCount")(count); }
  // Link `link` of GPU `gpu` up or down, its far end at `remote_bus_id` in NVML's form
  // ("00000000:1B:00.0"; "" when NVML cannot read it).
  void SetNvLink(unsigned gpu, unsigned link, bool active, const std::string& remote_bus_id) {
    Fn<void (*)(unsigned, unsigned, int, const char*)>("fakeNvmlSetNvLink")(
        gpu, link, active ? 1 : 0, remote_bus_id.c_str());
  }
  // What nvmlDeviceGetGpuFabricInfoV answers for GPU `gpu`.
  void SetFabric(unsigned gpu, int rc, unsigned state, int status,
                 const std::array<unsigned char, 16>& cluster_uuid, unsigned clique) {
    Fn<void (*)(unsigned, int, unsigned, int, const unsigned char*, unsigned)>("fakeNvmlSetFabric")(
        gpu, rc, state, status, cluster_uuid.data(), clique);
  }
  unsigned long long RegisteredEvents(unsigned gpu) {
    return Fn<unsigned long long (*)(unsigned)>("fakeNvmlRegisteredEvents")(gpu);
  }

 private:
  template <typename F>
  F Fn(const char* name) {
    void* address = dlsym(handle_, name);
    EXPECT_NE(address, nullptr) << name;
    return reinterpret_cast<F>(address);
  }
  void* handle_;
};

constexpr char kH100[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kA100[] = "GPU-66666666-7777-8888-9999-000000000000";

class NvmlFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.Reset();
    root_ = std::filesystem::path(::testing::TempDir()) /
            ("nvml_sysfs_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    AddPciDevice("pci0000:10/0000:10:01.0/0000:1b:00.0", "1");
    AddPciDevice("pci0000:40/0000:40:01.0/0000:43:00.0", "-1");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // Creates <root>/devices/<path> with numa_node and the bus/pci/devices symlink to it.
  void AddPciDevice(const std::string& path, const std::string& numa) {
    const std::filesystem::path dir = root_ / "devices" / path;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "numa_node") << numa << "\n";
    const std::filesystem::path links = root_ / "bus" / "pci" / "devices";
    std::filesystem::create_directories(links);
    std::filesystem::create_directory_symlink(std::filesystem::path("../../../devices") / path,
                                              links / dir.filename());
  }

  NvmlOptions Options() {
    NvmlOptions options;
    options.library_path = FAKE_NVML_PATH;
    options.sysfs_root = root_.string();
    return options;
  }

  std::unique_ptr<NvmlDeviceSource> Make() {
    auto source = NvmlDeviceSource::Create(Options());
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? std::move(*source) : nullptr;
  }

  FakeNvml fake_;
  std::filesystem::path root_;
};

}  // namespace dralens::driver::discovery::testing
