#include "driver/discovery/time_slice_control.h"

namespace dralens::driver::discovery {

absl::string_view ToString(TimeSlice interval) {
  switch (interval) {
    case TimeSlice::kDefault:
      return "Default";
    case TimeSlice::kShort:
      return "Short";
    case TimeSlice::kMedium:
      return "Medium";
    case TimeSlice::kLong:
      return "Long";
  }
  return "Unknown";
}

}  // namespace dralens::driver::discovery
