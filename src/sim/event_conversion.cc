#include "src/sim/event_conversion.h"

#include <string>
#include <utility>
#include <vector>

namespace dralens::sim {
namespace {

using json = nlohmann::json;

// (events.k8s.io/v1 name, core/v1 name) of every field but metadata, apiVersion and kind.
constexpr std::pair<const char*, const char*> kFields[] = {
    {"regarding", "involvedObject"},
    {"note", "message"},
    {"reportingController", "reportingComponent"},
    {"deprecatedSource", "source"},
    {"deprecatedFirstTimestamp", "firstTimestamp"},
    {"deprecatedLastTimestamp", "lastTimestamp"},
    {"deprecatedCount", "count"},
    {"reason", "reason"},
    {"type", "type"},
    {"action", "action"},
    {"eventTime", "eventTime"},
    {"series", "series"},
    {"related", "related"},
    {"reportingInstance", "reportingInstance"},
};

json Convert(const json& in, bool to_core) {
  json out = json::object();
  out["apiVersion"] = to_core ? "v1" : "events.k8s.io/v1";
  out["kind"] = "Event";
  if (in.contains("metadata")) {
    out["metadata"] = in["metadata"];
  }
  for (const auto& [v1, core] : kFields) {
    const char* from = to_core ? v1 : core;
    const char* to = to_core ? core : v1;
    if (in.contains(from) && !in[from].is_null()) {
      out[to] = in[from];
    }
  }
  return out;
}

std::string Str(const json& obj, const char* key) {
  return obj.contains(key) && obj[key].is_string() ? obj[key].get<std::string>() : std::string();
}

}  // namespace

json CoreEventFromStorage(const json& stored) { return Convert(stored, true); }
json CoreEventToStorage(const json& core) { return Convert(core, false); }

FieldErrors EventV1Problems(const json& obj, const json* old) {
  FieldErrors out;
  using T = FieldError::Type;
  for (const char* required :
       {"eventTime", "reportingController", "reportingInstance", "action", "reason"}) {
    if (Str(obj, required).empty()) {
      out.push_back({T::kRequired, required, "Required value"});
    }
  }
  for (const char* bounded : {"action", "reason", "reportingController", "reportingInstance"}) {
    if (Str(obj, bounded).size() > 128) {
      out.push_back({T::kTooLong, bounded, "Too long: may not be more than 128 bytes"});
    }
  }
  if (Str(obj, "note").size() > 1024) {
    out.push_back({T::kTooLong, "note", "Too long: may not be more than 1024 bytes"});
  }
  const std::string type = Str(obj, "type");
  if (type != "Normal" && type != "Warning") {
    out.push_back(
        {T::kNotSupported, "type",
         "Unsupported value: \"" + type + "\": supported values: \"Normal\", \"Warning\""});
  }
  if (obj.contains("series") && !obj["series"].is_null()) {
    const json& series = obj["series"];
    if (!series.is_object() || !series.contains("count") || !series["count"].is_number_integer() ||
        series["count"].get<int64_t>() < 2) {
      out.push_back({T::kInvalid, "series.count", "Invalid value: should be at least 2"});
    }
    if (!series.is_object() || Str(series, "lastObservedTime").empty()) {
      out.push_back({T::kRequired, "series.lastObservedTime", "Required value"});
    }
  }
  if (old != nullptr) {
    for (const char* immutable :
         {"regarding", "related", "reportingController", "reportingInstance", "action", "reason",
          "type", "note", "eventTime"}) {
      const json a = obj.contains(immutable) ? obj[immutable] : json();
      const json b = old->contains(immutable) ? (*old)[immutable] : json();
      if (a != b) {
        out.push_back({T::kInvalid, immutable, "Invalid value: field is immutable"});
      }
    }
  }
  return out;
}

}  // namespace dralens::sim
