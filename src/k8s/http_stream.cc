#include "src/k8s/http_stream.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/k8s/openssl_text.h"

namespace dralens::k8s {
namespace {

constexpr size_t kMaxHead = 64 << 10;  // status line and headers
constexpr size_t kMaxChunkLine = 4 << 10;
// How long a connect waits between looks at Abort().
constexpr absl::Duration kAbortPoll = absl::Milliseconds(100);

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

void SetTimeout(int fd, int option, absl::Duration d) {
  timeval tv{};
  if (d > absl::ZeroDuration() && d < absl::InfiniteDuration()) {
    tv = absl::ToTimeval(std::max(d, absl::Milliseconds(1)));
  }
  setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

std::string TlsError() { return OpenSslError("connection closed"); }

}  // namespace

HttpStream::HttpStream(HttpStreamOptions options) : options_(std::move(options)) {}

HttpStream::~HttpStream() {
  if (ssl_ != nullptr) {
    SSL_free(ssl_);
  }
  absl::MutexLock lock(&mu_);
  if (fd_ >= 0) {
    close(fd_);
  }
}

void HttpStream::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
  if (fd_ >= 0) {
    shutdown(fd_, SHUT_RDWR);  // wakes a blocked recv, send or handshake
  }
}

bool HttpStream::aborted() const {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

absl::Status HttpStream::Broken(absl::string_view what) const {
  if (aborted()) {
    return absl::CancelledError("aborted");
  }
  return absl::UnavailableError(what);
}

absl::Status HttpStream::Connect() {
  const std::string where = absl::StrCat(options_.host, ":", options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(options_.port);
  if (int rc = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", options_.host, ": ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  bool timed_out = false;
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (s < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (aborted_) {
        close(s);
        freeaddrinfo(found);
        return absl::CancelledError("aborted");
      }
      fd_ = s;
    }
    int rc = connect(s, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      // Wait in short slices: a socket that is still connecting does not wake on shutdown().
      while (true) {
        pollfd p{s, POLLOUT, 0};
        const absl::Duration left = deadline - absl::Now();
        if (left <= absl::ZeroDuration()) {
          timed_out = true;
          errno = ETIMEDOUT;
          break;
        }
        const int n = poll(&p, 1,
                           static_cast<int>(absl::ToInt64Milliseconds(std::min(left, kAbortPoll) +
                                                                      absl::Milliseconds(1))));
        if (aborted()) {
          freeaddrinfo(found);
          return absl::CancelledError("aborted");
        }
        if (n > 0) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
          break;
        }
        if (n < 0 && errno != EINTR) {
          break;
        }
      }
    }
    if (rc == 0) {
      fd = s;
      break;
    }
    last_error = std::strerror(errno);
    absl::MutexLock lock(&mu_);
    close(s);
    fd_ = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    if (timed_out) {
      return absl::DeadlineExceededError(absl::StrCat("connect to ", where, ": timed out"));
    }
    return absl::UnavailableError(absl::StrCat("connect to ", where, ": ", last_error));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetTimeout(fd, SO_RCVTIMEO, options_.connect_timeout);
  SetTimeout(fd, SO_SNDTIMEO, options_.write_timeout);
  return absl::OkStatus();
}

absl::Status HttpStream::Handshake() {
  const std::string where = absl::StrCat(options_.host, ":", options_.port);
  ssl_ = SSL_new(options_.tls);
  if (ssl_ == nullptr) {
    return absl::InternalError(absl::StrCat("TLS setup: ", OpenSslError()));
  }
  int fd;
  {
    absl::MutexLock lock(&mu_);
    fd = fd_;
  }
  SSL_set_fd(ssl_, fd);
  // Records are decrypted from one large read, not fetched header and body apart.
  SSL_set_read_ahead(ssl_, 1);
  SSL_set_default_read_buffer_len(ssl_, options_.read_size);
  const bool ip = IsIpLiteral(options_.host);
  if (!ip) {
    SSL_set_tlsext_host_name(ssl_, options_.host.c_str());  // SNI carries names only
  }
  if (SSL_connect(ssl_) != 1) {
    const int saved_errno = errno;
    const long verify = SSL_get_verify_result(ssl_);  // NOLINT(runtime/int): OpenSSL's type
    const std::string reason = TlsError();
    if (aborted()) {
      return absl::CancelledError("aborted");
    }
    if (verify != X509_V_OK) {
      return absl::UnavailableError(absl::StrCat("TLS handshake with ", where, ": ",
                                                 kUntrustedServer, " (",
                                                 X509_verify_cert_error_string(verify), ")"));
    }
    if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK) {
      return absl::DeadlineExceededError(absl::StrCat("TLS handshake with ", where, ": timed out"));
    }
    return absl::UnavailableError(absl::StrCat("TLS handshake with ", where, ": ", reason));
  }
  if (options_.verify_host) {
    X509* cert = SSL_get1_peer_certificate(ssl_);
    const bool named =
        cert != nullptr &&
        (ip ? X509_check_ip_asc(cert, options_.host.c_str(), 0) == 1
            : X509_check_host(cert, options_.host.data(), options_.host.size(), 0, nullptr) == 1);
    X509_free(cert);
    if (!named) {
      return absl::UnavailableError(absl::StrCat("TLS handshake with ", where, ": ",
                                                 kUntrustedServer, " (it does not name ",
                                                 options_.host, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status HttpStream::WriteAll(absl::string_view data) {
  int fd;
  {
    absl::MutexLock lock(&mu_);
    fd = fd_;
  }
  while (!data.empty()) {
    ssize_t n;
    if (ssl_ != nullptr) {
      n = SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 20)));
    } else {
      n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) {
        continue;
      }
    }
    if (n <= 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError("send the request: timed out");
      }
      return Broken(
          absl::StrCat("send the request: ", ssl_ != nullptr ? TlsError() : std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> HttpStream::Fill() {
  if (closed_) {
    return false;
  }
  // The buffer keeps its size (a resize would write the read size of zeros each time): what is
  // not decoded yet moves to its front when the space behind it is short of one read.
  if (in_pos_ == in_end_) {
    in_pos_ = in_end_ = 0;
  } else if (in_.size() - in_end_ < options_.read_size && in_pos_ > 0) {
    std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
    in_end_ -= in_pos_;
    in_pos_ = 0;
  }
  if (in_.size() - in_end_ < options_.read_size) {
    in_.resize(in_end_ + options_.read_size);
  }
  int fd;
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) {
      return absl::CancelledError("aborted");
    }
    fd = fd_;
  }
  const size_t before = in_end_;
  size_t got = 0;
  bool end = false;
  absl::Status error;
  if (ssl_ != nullptr) {
    // One read returns one record's data at most; the records after it wait, already
    // received, in the read-ahead buffer, and the next read takes them without a system call.
    // A read that would block is not made while there is data to hand over.
    while (got < options_.read_size) {
      ERR_clear_error();
      const int n =
          SSL_read(ssl_, in_.data() + before + got, static_cast<int>(options_.read_size - got));
      if (n > 0) {
        got += static_cast<size_t>(n);
        if (SSL_pending(ssl_) == 0) {
          break;
        }
        continue;
      }
      const int e = SSL_get_error(ssl_, n);
      if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0 && got == 0)) {
        end = true;  // close_notify, or the peer closed without one
      } else if (e == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        error = absl::DeadlineExceededError("read timed out");
      } else if (e == SSL_ERROR_SYSCALL && errno == EINTR) {
        continue;
      } else {
        error = Broken(absl::StrCat("TLS read: ", TlsError()));
      }
      break;
    }
  } else {
    while (true) {
      const ssize_t n = recv(fd, in_.data() + before, options_.read_size, 0);
      if (n > 0) {
        got = static_cast<size_t>(n);
      } else if (n == 0) {
        end = true;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        error = absl::DeadlineExceededError("read timed out");
      } else {
        error = Broken(absl::StrCat("read: ", std::strerror(errno)));
      }
      break;
    }
  }
  in_end_ = before + got;
  if (got > 0) {
    return true;
  }
  if (aborted()) {
    return absl::CancelledError("aborted");
  }
  if (!error.ok()) {
    return error;
  }
  closed_ = end;
  return false;
}

absl::Status HttpStream::ReadHead() {
  size_t end;
  while ((end = Received().find("\r\n\r\n", in_pos_)) == absl::string_view::npos) {
    if (in_end_ - in_pos_ > kMaxHead) {
      return absl::UnavailableError("response headers larger than 64 KiB");
    }
    absl::StatusOr<bool> more = Fill();
    if (!more.ok()) {
      return more.status();
    }
    if (!*more) {
      return absl::UnavailableError(in_end_ == in_pos_
                                        ? "connection closed before a response"
                                        : "connection closed inside the response headers");
    }
  }
  const absl::string_view head = Received().substr(in_pos_, end - in_pos_);
  in_pos_ = end + 4;
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  int status = 0;
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status_line[1], &status) || status < 100 || status > 999) {
    return absl::UnavailableError(
        absl::StrCat("malformed status line '", absl::CHexEscape(lines[0].substr(0, 80)), "'"));
  }
  bool chunked = false;
  bool has_length = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) {
      return absl::UnavailableError("malformed response header line");
    }
    std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (name == "transfer-encoding") {
      chunked = absl::EqualsIgnoreCase(value, "chunked");
      if (!chunked && !absl::EqualsIgnoreCase(value, "identity")) {
        return absl::UnavailableError(absl::StrCat("unsupported Transfer-Encoding '", value, "'"));
      }
    } else if (name == "content-length") {
      if (!absl::SimpleAtoi(value, &left_)) {
        return absl::UnavailableError(absl::StrCat("malformed Content-Length '", value, "'"));
      }
      has_length = true;
    }
    response_headers_.emplace_back(std::move(name), std::string(value));
  }
  body_ = chunked ? Body::kChunked : has_length ? Body::kLength : Body::kUntilClose;
  status_ = status;  // only for a response that parsed: status() is 0 after a failed Open
  return absl::OkStatus();
}

absl::Status HttpStream::Open(absl::string_view target, const Headers& headers) {
  if (absl::Status s = Connect(); !s.ok()) {
    return s;
  }
  if (options_.tls != nullptr) {
    if (absl::Status s = Handshake(); !s.ok()) {
      return s;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    SetTimeout(fd_, SO_RCVTIMEO, options_.read_timeout);
  }
  const bool v6 = options_.host.find(':') != std::string::npos;
  std::string request = absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: ", v6 ? "[" : "",
                                     options_.host, v6 ? "]" : "", ":", options_.port, "\r\n");
  for (const auto& [name, value] : headers) {
    absl::StrAppend(&request, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&request, "Connection: close\r\n\r\n");
  if (absl::Status s = WriteAll(request); !s.ok()) {
    return s;
  }
  return ReadHead();
}

std::string HttpStream::Header(absl::string_view name) const {
  for (const auto& [key, value] : response_headers_) {
    if (absl::EqualsIgnoreCase(key, name)) {
      return value;
    }
  }
  return "";
}

absl::StatusOr<size_t> HttpStream::Decode(std::string& out) {
  const size_t before = out.size();
  auto available = [&] { return in_end_ - in_pos_; };
  if (body_ == Body::kUntilClose) {
    out.append(in_.data() + in_pos_, available());
    in_pos_ = in_end_;
    return out.size() - before;
  }
  if (body_ == Body::kLength) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, available()));
    out.append(in_.data() + in_pos_, n);
    in_pos_ += n;
    left_ -= n;
    return n;
  }
  while (available() > 0 && chunk_ != Chunk::kDone) {
    if (chunk_ == Chunk::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, available()));
      out.append(in_.data() + in_pos_, n);
      in_pos_ += n;
      left_ -= n;
      if (left_ == 0) {
        chunk_ = Chunk::kDataEnd;
      }
      continue;
    }
    const size_t eol = Received().find("\r\n", in_pos_);
    if (eol == absl::string_view::npos) {
      if (available() > kMaxChunkLine) {
        return absl::UnavailableError("malformed chunked body: a line without its end");
      }
      break;  // the rest of the line comes with the next read
    }
    const absl::string_view line = Received().substr(in_pos_, eol - in_pos_);
    in_pos_ = eol + 2;
    if (chunk_ == Chunk::kDataEnd) {
      if (!line.empty()) {
        return absl::UnavailableError("malformed chunked body: data longer than its chunk");
      }
      chunk_ = Chunk::kSize;
    } else if (chunk_ == Chunk::kSize) {
      const absl::string_view size = absl::StripAsciiWhitespace(line.substr(0, line.find(';')));
      if (size.empty() || size.size() > 15 || !absl::SimpleHexAtoi(size, &left_)) {
        return absl::UnavailableError("malformed chunked body: a bad chunk size");
      }
      chunk_ = left_ == 0 ? Chunk::kTrailer : Chunk::kData;
    } else if (chunk_ == Chunk::kTrailer && line.empty()) {
      chunk_ = Chunk::kDone;
    }
  }
  return out.size() - before;
}

absl::StatusOr<bool> HttpStream::Read(std::string& out) {
  while (true) {
    absl::StatusOr<size_t> moved = Decode(out);
    if (!moved.ok()) {
      return moved.status();
    }
    if (*moved > 0) {
      return true;
    }
    if ((body_ == Body::kLength && left_ == 0) ||
        (body_ == Body::kChunked && chunk_ == Chunk::kDone)) {
      return false;
    }
    absl::StatusOr<bool> more = Fill();
    if (!more.ok()) {
      return more.status();
    }
    if (!*more) {
      if (body_ == Body::kUntilClose) {
        return false;
      }
      return absl::UnavailableError("connection closed before the end of the body");
    }
  }
}

}  // namespace dralens::k8s
