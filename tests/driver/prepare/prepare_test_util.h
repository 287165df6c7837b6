// Helpers for the prepare tests: temp directories, file reading and log capture.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "driver/prepare/claim_handler.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "src/common/log.h"
#include "src/k8s/rest_client.h"
#include "src/sim/api_server.h"

namespace dralens::driver::prepare::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dralens-prepare-XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void Spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Starts `server` and returns a client for it (null, with a test failure, if either fails).
inline std::unique_ptr<k8s::RestClient> StartApiServer(sim::ApiServer& server) {
  absl::Status started = server.Start();
  EXPECT_TRUE(started.ok()) << started;
  k8s::RestConfig config;
  config.server = server.url();
  auto client = k8s::RestClient::FromConfig(config);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Creates ResourceClaim `ns`/`name` with one request for `device_class` and, unless `device` is
// empty, allocates `device` of `driver`/`pool` to that request, as the scheduler would.
inline ClaimRef CreateClaim(k8s::KubeClient& client, const std::string& ns, const std::string& name,
                            const std::string& request, const std::string& device_class,
                            const std::string& driver, const std::string& pool,
                            const std::string& device) {
  nlohmann::json claim = {{"apiVersion", "resource.k8s.io/v1"},
                          {"kind", "ResourceClaim"},
                          {"metadata", {{"namespace", ns}, {"name", name}}}};
  claim["spec"]["devices"]["requests"] = nlohmann::json::array(
      {{{"name", request}, {"exactly", {{"deviceClassName", device_class}}}}});
  auto created = client.Create(k8s::kResourceClaims, ns, claim);
  EXPECT_TRUE(created.ok()) << created.status();
  if (!created.ok()) {
    return {};
  }
  if (!device.empty()) {
    nlohmann::json obj = *created;
    nlohmann::json result = {
        {"request", request}, {"driver", driver}, {"pool", pool}, {"device", device}};
    obj["status"]["allocation"]["devices"]["results"] = nlohmann::json::array({result});
    auto updated = client.Update(k8s::kResourceClaims, ns, obj, "status");
    EXPECT_TRUE(updated.ok()) << updated.status();
  }
  return {ns, (*created)["metadata"]["uid"].get<std::string>(), name};
}

// The value of the first counter or gauge series of `family` whose labels include `want`, or
// nullopt when none exists.
inline std::optional<double> SeriesValue(prometheus::Registry& registry, const std::string& family,
                                         const std::map<std::string, std::string>& want) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) {
      continue;
    }
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& l : m.label) {
        labels[l.name] = l.value;
      }
      bool match = true;
      for (const auto& [k, v] : want) {
        match = match && labels[k] == v;
      }
      if (match) {
        return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      }
    }
  }
  return std::nullopt;
}

// Captures log lines for the lifetime of the object.
class LogCapture {
 public:
  LogCapture() {
    common::SetLogSinkForTest([this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu_);
      lines_.push_back(line);
    });
  }
  ~LogCapture() { common::SetLogSinkForTest(nullptr); }

  bool Contains(const std::string& needle) {
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& line : lines_) {
      if (line.find(needle) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

}  // namespace dralens::driver::prepare::testing
