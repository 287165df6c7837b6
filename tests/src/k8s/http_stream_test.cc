// HttpStream against a raw TCP server that answers exactly the bytes a test gives it: body
// framing (chunked with extensions and trailers, Content-Length, until close), malformed and
// cut-off answers, the read timeout, Abort from another thread, and a refused connection.
// TLS is tested through RestClient::Watch in tls_test.cc.
#include "src/k8s/http_stream.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::k8s {
namespace {

using ::testing::HasSubstr;

// Accepts one connection, reads the request head, writes `pieces` one by one, then (unless
// `hold`) closes; with `hold`, keeps the connection open until the server is destroyed.
class RawServer {
 public:
  explicit RawServer(std::vector<std::string> pieces, bool hold = false)
      : pieces_(std::move(pieces)), hold_(hold) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(listen(listener_, 4), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RawServer() {
    done_.Notify();
    shutdown(listener_, SHUT_RDWR);
    thread_.join();
    close(listener_);
  }
  int port() const { return port_; }
  std::string request() {
    served_.WaitForNotificationWithTimeout(absl::Seconds(10));
    return request_;
  }

 private:
  void Serve() {
    const int fd = accept(listener_, nullptr, nullptr);
    if (fd < 0) {
      served_.Notify();
      return;
    }
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        break;
      }
      request_.append(buf, static_cast<size_t>(n));
    }
    served_.Notify();
    for (const std::string& piece : pieces_) {
      send(fd, piece.data(), piece.size(), MSG_NOSIGNAL);
      absl::SleepFor(absl::Milliseconds(5));  // separate reads on the other end, mostly
    }
    if (hold_) {
      done_.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
    close(fd);
  }

  std::vector<std::string> pieces_;
  bool hold_;
  int listener_ = -1;
  int port_ = 0;
  std::string request_;
  absl::Notification served_, done_;
  std::thread thread_;
};

HttpStreamOptions Local(int port) {
  HttpStreamOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.connect_timeout = absl::Seconds(5);
  o.read_timeout = absl::Seconds(10);
  return o;
}

// Reads the whole body; the error when a read fails.
absl::StatusOr<std::string> ReadAll(HttpStream& stream) {
  std::string body;
  while (true) {
    absl::StatusOr<bool> more = stream.Read(body);
    if (!more.ok()) {
      return more.status();
    }
    if (!*more) {
      return body;
    }
  }
}

TEST(HttpStreamTest, SendsTheRequestAndReadsAChunkedBodyAcrossReads) {
  RawServer server({"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n",
                    "Transfer-Encoding: chunked\r\nRetry-After: 3\r\n\r\n5;note=x\r\nhel",
                    "lo\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n", "\r\n"});
  HttpStream stream(Local(server.port()));
  ASSERT_TRUE(stream.Open("/api/v1/nodes?watch=true", {{"Authorization", "Bearer t"}}).ok());
  EXPECT_EQ(stream.status(), 200);
  EXPECT_EQ(stream.Header("retry-after"), "3");
  EXPECT_EQ(stream.Header("X-Missing"), "");
  absl::StatusOr<std::string> body = ReadAll(stream);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "hello world");
  const std::string request = server.request();
  EXPECT_THAT(request, HasSubstr("GET /api/v1/nodes?watch=true HTTP/1.1\r\n"));
  EXPECT_THAT(request, HasSubstr(absl::StrCat("Host: 127.0.0.1:", server.port(), "\r\n")));
  EXPECT_THAT(request, HasSubstr("Authorization: Bearer t\r\n"));
  EXPECT_THAT(request, HasSubstr("Connection: close\r\n"));
}

TEST(HttpStreamTest, AContentLengthBodyEndsAtItsLength) {
  RawServer server({"HTTP/1.1 410 Gone\r\nContent-Length: 12\r\n\r\n{\"code\":41", "0}extra"});
  HttpStream stream(Local(server.port()));
  ASSERT_TRUE(stream.Open("/", {}).ok());
  EXPECT_EQ(stream.status(), 410);
  absl::StatusOr<std::string> body = ReadAll(stream);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "{\"code\":410}");
}

TEST(HttpStreamTest, ABodyWithoutLengthEndsWithTheConnection) {
  RawServer server({"HTTP/1.0 200 OK\r\n\r\nfirst ", "second"});
  HttpStream stream(Local(server.port()));
  ASSERT_TRUE(stream.Open("/", {}).ok());
  absl::StatusOr<std::string> body = ReadAll(stream);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "first second");
}

TEST(HttpStreamTest, MalformedOrCutOffAnswersAreErrors) {
  struct Case {
    std::vector<std::string> pieces;
    bool open_fails;
    std::string message;
  };
  const std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const Case cases[] = {
      {{chunked + "zz\r\nabc\r\n"}, false, "bad chunk size"},
      {{chunked + "3\r\nabcdef\r\n"}, false, "data longer than its chunk"},
      {{chunked + "5\r\nab"}, false, "closed before the end of the body"},
      {{chunked + "5\r\nhello\r\n"}, false, "closed before the end of the body"},
      {{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"}, false, "closed before the end"},
      {{"SMTP ready\r\n\r\n"}, true, "malformed status line"},
      {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"}, true, "Transfer-Encoding"},
      {{"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n"}, true, "Content-Length"},
      {{"HTTP/1.1 200 OK\r\nContent-"}, true, "inside the response headers"},
      {{}, true, "before a response"},
  };
  for (const Case& c : cases) {
    RawServer server(c.pieces);
    HttpStream stream(Local(server.port()));
    absl::Status status = stream.Open("/", {});
    if (status.ok()) {
      status = ReadAll(stream).status();
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << c.message << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
    EXPECT_EQ(stream.status() == 0, c.open_fails) << c.message;
  }
}

TEST(HttpStreamTest, AQuietServerTimesTheReadOut) {
  RawServer server({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, /*hold=*/true);
  HttpStreamOptions options = Local(server.port());
  options.read_timeout = absl::Milliseconds(200);
  HttpStream stream(options);
  ASSERT_TRUE(stream.Open("/", {}).ok());
  std::string body;
  EXPECT_EQ(stream.Read(body).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(HttpStreamTest, AbortEndsABlockedRead) {
  RawServer server({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"},
                   /*hold=*/true);
  HttpStream stream(Local(server.port()));
  ASSERT_TRUE(stream.Open("/", {}).ok());
  std::string body;
  absl::StatusOr<bool> first = stream.Read(body);
  ASSERT_TRUE(first.ok() && *first) << first.status();
  EXPECT_EQ(body, "abc");
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    stream.Abort();
  });
  EXPECT_EQ(stream.Read(body).status().code(), absl::StatusCode::kCancelled);
  aborter.join();
  // Once aborted, a stream stays so.
  EXPECT_EQ(stream.Read(body).status().code(), absl::StatusCode::kCancelled);
}

TEST(HttpStreamTest, ARefusedConnectionNamesWhere) {
  int port;
  {
    RawServer closed(std::vector<std::string>{});
    port = closed.port();
    HttpStream knock(Local(port));  // let the server's accept return, so that it closes
    knock.Open("/", {}).IgnoreError();
  }
  HttpStream stream(Local(port));
  absl::Status status = stream.Open("/", {});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("connect to 127.0.0.1:", port)));
}

TEST(HttpStreamTest, AnAbortBeforeOpenIsCancelled) {
  RawServer server({"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"});
  HttpStream stream(Local(server.port()));
  stream.Abort();
  EXPECT_EQ(stream.Open("/", {}).code(), absl::StatusCode::kCancelled);
  HttpStream knock(Local(server.port()));  // lets the server's accept return
  EXPECT_TRUE(knock.Open("/", {}).ok());
}

}  // namespace
}  // namespace dralens::k8s
