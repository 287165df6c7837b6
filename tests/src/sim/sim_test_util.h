// Helpers for the embedded API server tests: a running server, a raw HTTP client and a watch
// stream reader. Everything talks HTTP through cpp-httplib, as an outside client would.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/sim/api_server.h"

namespace dralens::sim::testing {

using nlohmann::json;

struct Reply {
  int status = 0;  // 0 when the request failed at the transport level
  json body;       // null when the body is not JSON
  std::string raw;
  httplib::Headers headers;
  httplib::Error error = httplib::Error::Success;

  std::string Reason() const { return body.is_object() ? body.value("reason", "") : ""; }
  std::string Rv() const {
    return body.is_object() && body.contains("metadata")
               ? body["metadata"].value("resourceVersion", "")
               : "";
  }
};

inline Reply ToReply(const httplib::Result& r) {
  Reply out;
  if (!r) {
    out.error = r.error();
    return out;
  }
  out.status = r->status;
  out.raw = r->body;
  out.headers = r->headers;
  out.body = json::parse(r->body, nullptr, false);
  if (out.body.is_discarded()) {
    out.body = json();
  }
  return out;
}

// A plain HTTP client for one server.
class Http {
 public:
  explicit Http(int port) : client_("127.0.0.1", port) {
    client_.set_connection_timeout(2);
    client_.set_read_timeout(5);
    client_.set_decompress(false);
  }
  Reply Get(const std::string& path) { return ToReply(client_.Get(path)); }
  Reply Post(const std::string& path, const json& body,
             const std::string& type = "application/json") {
    return ToReply(client_.Post(path, body.dump(), type));
  }
  Reply PostRaw(const std::string& path, const std::string& body, const std::string& type) {
    return ToReply(client_.Post(path, body, type));
  }
  Reply Put(const std::string& path, const json& body,
            const std::string& type = "application/json") {
    return ToReply(client_.Put(path, body.dump(), type));
  }
  Reply Patch(const std::string& path, const json& body,
              const std::string& type = "application/merge-patch+json") {
    return ToReply(client_.Patch(path, body.dump(), type));
  }
  Reply Delete(const std::string& path) { return ToReply(client_.Delete(path)); }
  Reply Delete(const std::string& path, const json& options) {
    return ToReply(client_.Delete(path, options.dump(), "application/json"));
  }

 private:
  httplib::Client client_;
};

// Reads a watch stream on a background thread; events arrive in Next().
class WatchReader {
 public:
  WatchReader(int port, std::string path) : client_("127.0.0.1", port) {
    client_.set_read_timeout(10);
    client_.set_decompress(false);
    thread_ = std::thread([this, path = std::move(path)] {
      auto res = client_.Get(
          path,
          [this](const httplib::Response& r) {
            std::lock_guard<std::mutex> l(mu_);
            status_ = r.status;
            return true;
          },
          [this](const char* data, size_t len) {
            std::lock_guard<std::mutex> l(mu_);
            buffer_.append(data, len);
            size_t nl;
            while ((nl = buffer_.find('\n')) != std::string::npos) {
              lines_.push_back(buffer_.substr(0, nl));
              buffer_.erase(0, nl + 1);
            }
            cv_.notify_all();
            return true;
          });
      std::lock_guard<std::mutex> l(mu_);
      ended_ = true;
      clean_end_ = static_cast<bool>(res);
      if (res && status_ == 0) {
        status_ = res->status;
        body_ = res->body;
      }
      cv_.notify_all();
    });
  }
  ~WatchReader() { Close(); }

  // The next event, or nullopt when the stream ended or nothing came within `timeout_ms`.
  std::optional<json> Next(int timeout_ms = 2000) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::milliseconds(timeout_ms),
                 [this] { return !lines_.empty() || ended_; });
    if (lines_.empty()) {
      return std::nullopt;
    }
    std::string line = lines_.front();
    lines_.pop_front();
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      return json{{"type", "UNPARSABLE"}, {"raw", line}};
    }
    return j;
  }
  // The next event that is not a BOOKMARK.
  std::optional<json> NextNonBookmark(int timeout_ms = 2000) {
    for (;;) {
      std::optional<json> e = Next(timeout_ms);
      if (!e || (*e)["type"] != "BOOKMARK") {
        return e;
      }
    }
  }
  // Waits until the server ends the stream; true if it did within `timeout_ms`.
  bool WaitEnded(int timeout_ms = 2000) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [this] { return ended_; });
  }
  bool CleanEnd() {
    std::lock_guard<std::mutex> l(mu_);
    return clean_end_;
  }
  std::string Leftover() {
    std::lock_guard<std::mutex> l(mu_);
    return buffer_;
  }
  int Status() {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
  }
  void Close() {
    if (thread_.joinable()) {
      client_.stop();
      thread_.join();
    }
  }

 private:
  httplib::Client client_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string buffer_;
  std::deque<std::string> lines_;
  bool ended_ = false;
  bool clean_end_ = false;
  int status_ = 0;
  std::string body_;
};

// A fixture with a started server and a client.
class ServerTest : public ::testing::Test {
 protected:
  virtual ApiServerOptions Options() { return {}; }
  void SetUp() override {
    server_ = std::make_unique<ApiServer>(Options());
    ASSERT_TRUE(server_->Start().ok());
    http_ = std::make_unique<Http>(server_->port());
  }
  void TearDown() override { server_->Stop(); }

  std::unique_ptr<WatchReader> Watch(const std::string& path) {
    return std::make_unique<WatchReader>(server_->port(), path);
  }

  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<Http> http_;
};

inline constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
inline constexpr char kClasses[] = "/apis/resource.k8s.io/v1/deviceclasses";
inline constexpr char kAllClaims[] = "/apis/resource.k8s.io/v1/resourceclaims";
inline std::string Claims(const std::string& ns = "default") {
  return "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims";
}
inline std::string Pods(const std::string& ns = "default") {
  return "/api/v1/namespaces/" + ns + "/pods";
}
inline constexpr char kNodes[] = "/api/v1/nodes";
inline std::string Leases(const std::string& ns = "kube-system") {
  return "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases";
}

inline json Slice(const std::string& name, const std::string& node = "node-a",
                  const std::string& driver = "gpu.dralens.dev") {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"driver", driver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices",
             {{{"name", "gpu-0"},
               {"attributes",
                {{"type", {{"string", "gpu"}}},
                 {"cudaComputeCapability", {{"version", "8.0.0"}}},
                 {"resource.kubernetes.io/pciBusID", {{"string", "0000:3b:00.0"}}}}},
               {"capacity", {{"memory", {{"value", "40Gi"}}}}}}}}}}};
}

inline json Claim(const std::string& name) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"devices",
             {{"requests",
               {{{"name", "gpu"},
                 {"exactly",
                  {{"deviceClassName", "gpu.dralens.dev"},
                   {"selectors",
                    {{{"cel", {{"expression", "device.driver == 'gpu.dralens.dev'"}}}}}}}}}}}}}}}};
}

inline json DeviceClass(const std::string& name) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"selectors", {{{"cel", {{"expression", "device.driver == 'gpu.dralens.dev'"}}}}}}}}};
}

inline json Pod(const std::string& name, const std::string& node = "") {
  json p = {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}}},
            {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) {
    p["spec"]["nodeName"] = node;
  }
  return p;
}

inline json Node(const std::string& name) {
  return {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
}

inline json Lease(const std::string& name) {
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", {{"name", name}}},
          {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}}}};
}

inline uint64_t RvOf(const json& obj) {
  return std::stoull(obj["metadata"]["resourceVersion"].get<std::string>());
}

}  // namespace dralens::sim::testing
