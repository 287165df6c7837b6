#include "src/common/thread_name.h"

#include <pthread.h>

#include <string>

namespace dralens::common {

void NameThisThread(absl::string_view name) {
  // The kernel refuses a name of 16 bytes or more (ERANGE) rather than cutting it.
  const std::string cut(name.substr(0, 15));
  pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace dralens::common
