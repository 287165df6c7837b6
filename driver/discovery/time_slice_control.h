// TimeSliceControl: the compute time-slice interval of full GPUs (sharing strategy TimeSlicing).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dralens::driver::discovery {

// Time-slice interval names of `nvidia-smi compute-policy --set-timeslice` (reference §7.5).
enum class TimeSlice { kDefault = 0, kShort = 1, kMedium = 2, kLong = 3 };
absl::string_view ToString(TimeSlice interval);

// Thread-safety: every method may be called from any thread.
class TimeSliceControl {
 public:
  virtual ~TimeSliceControl() = default;

  // Sets the compute time-slice interval of a full GPU.
  virtual absl::Status SetTimeSlice(absl::string_view gpu_uuid, TimeSlice interval) = 0;
};

}  // namespace dralens::driver::discovery
