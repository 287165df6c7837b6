// HttpStream: one HTTP/1.1 GET, over TCP or TLS, whose response body is read as it arrives.
//
// A watch is one long response. During a burst (a relist elsewhere, a rollout, a node pool
// coming back) its events arrive faster than they are applied and pile up in the socket; a
// reader that takes 4 KiB per read, with a poll before each (cpp-httplib's client), pays two
// system calls per few events. Here one read takes what the socket holds, up to 256 KiB, and
// blocks in recv with SO_RCVTIMEO as its bound instead of a poll in front.
//
// - TLS: the caller's SSL_CTX carries the trust anchors, the verification callback, the client
//   certificate and the verify mode. This sets SNI for host names and, when asked, checks that
//   the server certificate names the host (DNS or IP SAN, as X509_check_host/ip match them).
// - Body: chunked, Content-Length, or up to the end of the connection. A chunked body cut off
//   before its last chunk is an error; the request asks the server to close at the end.
// - Abort() from another thread ends a blocked connect or read.
#pragma once

#include <openssl/ssl.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dralens::k8s {

struct HttpStreamOptions {
  std::string host;  // a name, or an IPv4/IPv6 literal (without brackets)
  int port = 0;
  SSL_CTX* tls = nullptr;   // null: plain TCP. Not owned; outlives the stream.
  bool verify_host = true;  // with TLS: the certificate must name `host`
  absl::Duration connect_timeout = absl::Seconds(30);  // the connect, and the TLS handshake
  absl::Duration read_timeout = absl::Minutes(10);     // the longest wait for the next bytes
  absl::Duration write_timeout = absl::Seconds(30);
  size_t read_size = 256 << 10;  // the most one read asks for
};

class HttpStream {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  explicit HttpStream(HttpStreamOptions options);
  ~HttpStream();
  HttpStream(const HttpStream&) = delete;
  HttpStream& operator=(const HttpStream&) = delete;

  // Connects, sends GET `target` with `headers` (Host and Connection are added), and reads the
  // response's status line and headers. Errors: kUnavailable (connect, TLS, a broken or
  // malformed response), kDeadlineExceeded (a timeout), kCancelled (Abort).
  absl::Status Open(absl::string_view target, const Headers& headers);
  // The response's status code; 0 until Open has read a well-formed response head.
  int status() const { return status_; }
  // The response header's value (name case-insensitive), "" when absent.
  std::string Header(absl::string_view name) const;

  // Appends the body's next bytes, de-chunked, to `out`: what one read brought, at least one
  // byte while the body goes on. Returns false once the body has ended (nothing appended).
  absl::StatusOr<bool> Read(std::string& out);

  // From any thread: a blocked Open or Read returns kCancelled soon after. Idempotent.
  void Abort();

 private:
  enum class Body { kChunked, kLength, kUntilClose };
  enum class Chunk { kSize, kData, kDataEnd, kTrailer, kDone };

  absl::Status Connect();
  absl::Status Handshake();
  absl::Status WriteAll(absl::string_view data);
  // One read from the connection into in_; false at its end.
  absl::StatusOr<bool> Fill();
  absl::Status ReadHead();
  // Moves what in_ holds of the body to `out`; returns the bytes moved.
  absl::StatusOr<size_t> Decode(std::string& out);
  absl::Status Broken(absl::string_view what) const;
  bool aborted() const;

  const HttpStreamOptions options_;
  mutable absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  SSL* ssl_ = nullptr;

  // What was received: in_[0, in_end_); in_[in_pos_, in_end_) is not decoded yet.
  absl::string_view Received() const { return absl::string_view(in_.data(), in_end_); }
  std::string in_;
  size_t in_pos_ = 0;
  size_t in_end_ = 0;
  bool closed_ = false;  // the connection has ended

  int status_ = 0;
  Headers response_headers_;
  Body body_ = Body::kUntilClose;
  Chunk chunk_ = Chunk::kSize;
  uint64_t left_ = 0;  // of the current chunk, or of the Content-Length body
};

}  // namespace dralens::k8s
