// What the API client says of TLS failures, for cpp-httplib's connections and HttpStream alike.
#pragma once

#include <openssl/err.h>

#include <string>

#include "absl/strings/string_view.h"

namespace dralens::k8s {

// A server certificate that failed verification, whichever check refused it.
inline constexpr absl::string_view kUntrustedServer =
    "the server certificate is not trusted by the configured CA or does not match the host";

// The text of the oldest error OpenSSL queued on this thread (the queue is cleared), or `none`
// when it queued none.
inline std::string OpenSslError(absl::string_view none = "unknown OpenSSL error") {
  const unsigned long err = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (err == 0) {
    return std::string(none);
  }
  char buf[256];
  ERR_error_string_n(err, buf, sizeof(buf));
  return buf;
}

}  // namespace dralens::k8s
