// NvmlDeviceSource, time-slicing through nvidia-smi (NVML has no public call for it).
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/discovery/nvml/nvml_device_source.h"
#include "driver/discovery/nvml/nvml_internal.h"
#include "driver/discovery/nvml/nvml_status.h"
#include "src/common/log.h"
#include "src/common/status.h"
#include "src/model/mig_profile.h"

extern char** environ;

namespace dralens::driver::discovery {

using namespace nvml;           // NOLINT(build/namespaces): the NVML C names read best unqualified
using namespace nvml_internal;  // NOLINT(build/namespaces)

absl::Status NvmlDeviceSource::RunNvidiaSmi(const std::vector<std::string>& args) {
  std::vector<std::string> argv_storage = {options_.nvidia_smi_path};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);
  // nvidia-smi runs with our libnvidia-ml preloaded, as the DRA driver does (reference §7.5).
  std::vector<std::string> env_storage;
  const char* preload = nullptr;
  for (char** e = environ; *e != nullptr; ++e) {
    if (absl::StartsWith(*e, "LD_PRELOAD=")) {
      preload = *e + strlen("LD_PRELOAD=");
    } else {
      env_storage.emplace_back(*e);
    }
  }
  if (absl::StrContains(options_.library_path, "/")) {
    env_storage.push_back(absl::StrCat("LD_PRELOAD=", options_.library_path,
                                       preload != nullptr && *preload != '\0' ? " " : "",
                                       preload != nullptr ? preload : ""));
  } else if (preload != nullptr) {
    env_storage.push_back(absl::StrCat("LD_PRELOAD=", preload));
  }
  std::vector<char*> envp;
  for (std::string& entry : env_storage) {
    envp.push_back(entry.data());
  }
  envp.push_back(nullptr);

  const std::string command = absl::StrJoin(argv_storage, " ");
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
  if (err != 0) {
    return common::ErrnoStatus(err, "spawn", command);
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      return common::ErrnoStatus(errno, "wait for", command);
    }
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return absl::InternalError(
        absl::StrCat(command, ": ",
                     WIFEXITED(wstatus) ? absl::StrCat("exit status ", WEXITSTATUS(wstatus))
                                        : absl::StrCat("killed by signal ", WTERMSIG(wstatus))));
  }
  return absl::OkStatus();
}

absl::Status NvmlDeviceSource::SetTimeSlice(absl::string_view gpu_uuid, TimeSlice interval) {
  const int value = static_cast<int>(interval);
  if (value < 0 || value > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("time-slice interval ", value, " is out of range 0..3"));
  }
  absl::MutexLock lock(&mu_);
  // A clean NotFound / GPU_IS_LOST before running anything.
  RETURN_IF_ERROR(HandleByUuid(gpu_uuid).status());
  const std::string uuid(gpu_uuid);
  RETURN_IF_ERROR(RunNvidiaSmi({"-i", uuid, "-c", "DEFAULT"}));
  return RunNvidiaSmi({"compute-policy", "-i", uuid, "--set-timeslice", absl::StrCat(value)});
}

}  // namespace dralens::driver::discovery
