// Helpers shared by the k8s tests: temp dirs, files, a test PKI, a recording clock and a
// small scriptable HTTP server.
#pragma once

#include <httplib.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/common/clock.h"

namespace dralens::k8s::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dralens-k8s-XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs a shell command; returns its exit status.
inline int Run(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str());
}

// A CA, a server certificate for 127.0.0.1/localhost, a client certificate, an unrelated CA, and
// a server certificate of the same CA for another host only, made with the openssl CLI.
struct TestPki {
  std::string ca_crt, ca_key, server_crt, server_key, client_crt, client_key, other_ca_crt;
  std::string other_host_crt, other_host_key;

  static TestPki Make(const TempDir& dir) {
    TestPki pki;
    const std::string d = dir.path();
    pki.ca_crt = d + "/ca.crt";
    pki.ca_key = d + "/ca.key";
    pki.server_crt = d + "/server.crt";
    pki.server_key = d + "/server.key";
    pki.client_crt = d + "/client.crt";
    pki.client_key = d + "/client.key";
    pki.other_ca_crt = d + "/other-ca.crt";
    pki.other_host_crt = d + "/other-host.crt";
    pki.other_host_key = d + "/other-host.key";
    WriteFile(d + "/other-host.ext",
              "subjectAltName=DNS:api.elsewhere.example\nextendedKeyUsage=serverAuth\n");
    WriteFile(d + "/san.ext",
              "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
    WriteFile(d + "/client.ext", "extendedKeyUsage=clientAuth\n");
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::vector<std::string> commands = {
        absl::StrCat("openssl req -x509 ", key, " -keyout ", pki.ca_key, " -out ", pki.ca_crt,
                     " -days 2 -subj /CN=dralens-test-ca"),
        absl::StrCat("openssl req ", key, " -keyout ", pki.server_key, " -out ", d,
                     "/server.csr -subj /CN=127.0.0.1"),
        absl::StrCat("openssl x509 -req -in ", d, "/server.csr -CA ", pki.ca_crt, " -CAkey ",
                     pki.ca_key, " -CAcreateserial -out ", pki.server_crt, " -days 2 -extfile ", d,
                     "/san.ext"),
        absl::StrCat("openssl req ", key, " -keyout ", pki.client_key, " -out ", d,
                     "/client.csr -subj /CN=dralens-client/O=system:nodes"),
        absl::StrCat("openssl x509 -req -in ", d, "/client.csr -CA ", pki.ca_crt, " -CAkey ",
                     pki.ca_key, " -CAcreateserial -out ", pki.client_crt, " -days 2 -extfile ", d,
                     "/client.ext"),
        absl::StrCat("openssl req -x509 ", key, " -keyout ", d, "/other-ca.key -out ",
                     pki.other_ca_crt, " -days 2 -subj /CN=unrelated-ca"),
        absl::StrCat("openssl req ", key, " -keyout ", pki.other_host_key, " -out ", d,
                     "/other-host.csr -subj /CN=api.elsewhere.example"),
        absl::StrCat("openssl x509 -req -in ", d, "/other-host.csr -CA ", pki.ca_crt, " -CAkey ",
                     pki.ca_key, " -CAcreateserial -out ", pki.other_host_crt, " -days 2 -extfile ",
                     d, "/other-host.ext"),
    };
    for (const std::string& command : commands) {
      EXPECT_EQ(Run(command), 0) << command;
    }
    return pki;
  }
};

// Records requested sleeps and sleeps only briefly, so retry delays can be asserted without
// waiting for them.
class RecordingClock : public common::Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override {
    {
      absl::MutexLock lock(&mu_);
      sleeps_.push_back(d);
    }
    absl::SleepFor(std::min(d, absl::Milliseconds(1)));
  }
  std::vector<absl::Duration> sleeps() {
    absl::MutexLock lock(&mu_);
    return sleeps_;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Duration> sleeps_;
};

// An httplib server on a free loopback port, serving on a background thread.
template <typename ServerT = httplib::Server>
class LocalServer {
 public:
  template <typename... Args>
  explicit LocalServer(Args&&... args) : server_(std::forward<Args>(args)...) {}
  ~LocalServer() { Stop(); }

  ServerT& server() { return server_; }
  void Start() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) {
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  void Stop() {
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }
  int port() const { return port_; }
  std::string url(const std::string& scheme = "http") const {
    return absl::StrCat(scheme, "://127.0.0.1:", port_);
  }

 private:
  ServerT server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace dralens::k8s::testing
