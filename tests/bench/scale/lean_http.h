// Small pieces shared by the lean API server's files: metav1.Status bodies, error answers and
// query flags. Internal to tests/bench/scale.
#pragma once

#include <httplib.h>

#include <string>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/bench/scale/render.h"

namespace dralens::bench::scale::lean_http {

inline constexpr char kJson[] = "application/json";
// How often an idle watch stream wakes to check for stop, drops and bookmarks.
inline constexpr absl::Duration kWatchPoll = absl::Milliseconds(100);

inline int Index(Resource r) { return static_cast<int>(r); }

// A metav1.Status failure body.
inline std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", reason},
      {"code", code}}
      .dump();
}

// Answers `res` with `code` and a Status body.
inline void Fail(httplib::Response& res, int code, const std::string& reason,
                 const std::string& msg) {
  res.status = code;
  res.set_content(StatusBody(code, reason, msg), kJson);
}

// Whether query parameter `name` is "true" or "1".
inline bool IsTrue(const httplib::Request& req, const char* name) {
  const std::string v = req.get_param_value(name);
  return v == "true" || v == "1";
}

}  // namespace dralens::bench::scale::lean_http
