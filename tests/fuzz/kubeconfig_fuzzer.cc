// Fuzzes the kubeconfig parser (src/k8s/config.h ParseKubeconfig): arbitrary YAML yields a
// config or an error, never a crash. Relative paths resolve against a directory that does not
// exist; parsing reads no files.
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/k8s/config.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<dralens::k8s::RestConfig> config =
      dralens::k8s::ParseKubeconfig(text, "/nonexistent/fuzz", "fuzz-input");
  if (!config.ok()) {
    FUZZ_CHECK(!config.status().message().empty(), "a parse error says why");
  }
  // A named context takes the other path through context selection.
  (void)dralens::k8s::ParseKubeconfig(text, "/nonexistent/fuzz", "fuzz-input", {.context = "dev"});
  return 0;
}
