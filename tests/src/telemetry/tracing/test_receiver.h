// Helpers for the exporter tests: an OTLP receiver on a real httplib server (127.0.0.1, port 0)
// that answers from a script, and a clock whose sleeps return at once but move its time.
#pragma once

#include <httplib.h>

#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "tests/testing/gunzip.h"

namespace dralens::telemetry::testing {

using ::dralens::testing::Gunzip;

// Time moves only by SleepFor(), which returns immediately: retry waits become exact and free.
class SteppingClock : public common::Clock {
 public:
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void SleepFor(absl::Duration d) override {
    absl::MutexLock lock(&mu_);
    now_ += d;
    slept_ += d;
  }
  absl::Duration slept() {
    absl::MutexLock lock(&mu_);
    return slept_;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1700000000);
  absl::Duration slept_ ABSL_GUARDED_BY(mu_);
};

struct Reply {
  int status = 200;
  std::string body = "{}";
  std::vector<std::pair<std::string, std::string>> headers = {};
};

struct ReceivedRequest {
  std::string method;
  std::string path;
  httplib::Headers headers;
  std::string body;
  // The test clock's time when the request arrived.
  absl::Time arrival;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// A CA and a server certificate for 127.0.0.1, made with the openssl CLI in `dir`.
struct TestPki {
  std::string ca_crt, server_crt, server_key, other_ca_crt;

  static TestPki Make(const std::string& dir) {
    TestPki pki{dir + "/ca.crt", dir + "/server.crt", dir + "/server.key", dir + "/other-ca.crt"};
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::vector<std::string> commands = {
        "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > " + dir +
            "/san.ext",
        "openssl req -x509 " + key + " -keyout " + dir + "/ca.key -out " + pki.ca_crt +
            " -days 2 -subj /CN=dralens-test-ca",
        "openssl req " + key + " -keyout " + pki.server_key + " -out " + dir +
            "/server.csr -subj /CN=127.0.0.1",
        "openssl x509 -req -in " + dir + "/server.csr -CA " + pki.ca_crt + " -CAkey " + dir +
            "/ca.key -CAcreateserial -out " + pki.server_crt + " -days 2 -extfile " + dir +
            "/san.ext",
        "openssl req -x509 " + key + " -keyout " + dir + "/other-ca.key -out " + pki.other_ca_crt +
            " -days 2 -subj /CN=unrelated-ca",
    };
    for (const std::string& command : commands) {
      EXPECT_EQ(std::system((command + " >/dev/null 2>&1").c_str()), 0) << command;
    }
    return pki;
  }
};

class TestReceiver {
 public:
  // `server` may be an httplib::SSLServer; by default a plain one.
  explicit TestReceiver(common::Clock& clock = common::RealClock(),
                        std::unique_ptr<httplib::Server> server = nullptr)
      : clock_(clock),
        server_(server != nullptr ? std::move(server) : std::make_unique<httplib::Server>()),
        scheme_(dynamic_cast<httplib::SSLServer*>(server_.get()) != nullptr ? "https" : "http") {
    server_->set_keep_alive_timeout(1);
    server_->set_tcp_nodelay(true);
    server_->Post(
        ".*", [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); });
    port_ = server_->bind_to_any_port("127.0.0.1");
    EXPECT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    // stop() is a no-op until the server runs, so a quick test could otherwise hang on join.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!server_->is_running() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_TRUE(server_->is_running());
  }
  ~TestReceiver() {
    Release();
    server_->stop();
    thread_.join();
  }

  int port() const { return port_; }
  std::string base_url() const { return scheme_ + "://127.0.0.1:" + std::to_string(port_); }
  std::string traces_url() const { return base_url() + "/v1/traces"; }

  // Answers the next requests in order; once the script runs out, 200 "{}".
  void Script(std::vector<Reply> replies) {
    absl::MutexLock lock(&mu_);
    script_.assign(replies.begin(), replies.end());
  }
  // Holds every request without answering until Release() (or ten seconds).
  void Hang() {
    absl::MutexLock lock(&mu_);
    hang_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    hang_ = false;
  }

  std::vector<ReceivedRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  bool AwaitRequests(size_t n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return requests_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(10));
  }

 private:
  void Handle(const httplib::Request& req, httplib::Response& res) {
    Reply reply;
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back({req.method, req.path, req.headers, req.body, clock_.Now()});
      if (!script_.empty()) {
        reply = script_.front();
        script_.pop_front();
      }
      auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !hang_; };
      mu_.AwaitWithTimeout(absl::Condition(&released), absl::Seconds(10));
    }
    res.status = reply.status;
    for (const auto& [name, value] : reply.headers) {
      res.set_header(name, value);
    }
    res.set_content(reply.body, "application/json");
  }

  common::Clock& clock_;
  std::unique_ptr<httplib::Server> server_;
  std::string scheme_;
  int port_ = -1;
  std::thread thread_;
  absl::Mutex mu_;
  std::deque<Reply> script_ ABSL_GUARDED_BY(mu_);
  bool hang_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<ReceivedRequest> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dralens::telemetry::testing
