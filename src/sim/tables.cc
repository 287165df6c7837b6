#include "src/sim/tables.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dralens::sim {
namespace {

using json = nlohmann::json;

std::string Str(const json& obj, const char* key) {
  return obj.is_object() && obj.contains(key) && obj[key].is_string() ? obj[key].get<std::string>()
                                                                      : std::string();
}

std::optional<absl::Time> ParseTime(const std::string& s) {
  absl::Time t;
  std::string err;
  if (s.empty() || !absl::ParseTime(absl::RFC3339_full, s, &t, &err)) {
    return std::nullopt;
  }
  return t;
}

std::string Since(const std::string& stamp, absl::Time now) {
  std::optional<absl::Time> t = ParseTime(stamp);
  return t.has_value() ? HumanDuration(now - *t) : "<unknown>";
}

json Column(const char* name, const char* type, int priority, const char* description) {
  return {{"name", name},
          {"type", type},
          {"format", ""},
          {"description", description},
          {"priority", priority}};
}

json Row(const json& event, absl::Time now, absl::string_view include_object) {
  const json series = event.value("series", json());
  std::string last;
  if (series.is_object()) {
    last = Since(Str(series, "lastObservedTime"), now);
  } else if (!Str(event, "lastTimestamp").empty()) {
    last = Since(Str(event, "lastTimestamp"), now);
  } else {
    last = Since(Str(event, "eventTime"), now);
  }
  const std::string first = !Str(event, "firstTimestamp").empty()
                                ? Since(Str(event, "firstTimestamp"), now)
                                : Since(Str(event, "eventTime"), now);
  const json involved = event.value("involvedObject", json::object());
  std::string kind = Str(involved, "kind");
  for (char& c : kind) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const json source = event.value("source", json::object());
  std::string from = Str(source, "component");
  if (from.empty()) {
    from = Str(event, "reportingComponent");
    if (!Str(event, "reportingInstance").empty()) {
      absl::StrAppend(&from, ", ", Str(event, "reportingInstance"));
    }
  } else if (!Str(source, "host").empty()) {
    absl::StrAppend(&from, ", ", Str(source, "host"));
  }
  int64_t count = 1;
  if (series.is_object() && series.value("count", json()).is_number_integer()) {
    count = series["count"].get<int64_t>();
  } else if (event.value("count", json()).is_number_integer()) {
    count = event["count"].get<int64_t>();
  }
  const json md = event.value("metadata", json::object());
  json row = {{"cells",
               {last, Str(event, "type"), Str(event, "reason"),
                absl::StrCat(kind, "/", Str(involved, "name")), Str(involved, "fieldPath"), from,
                Str(event, "message"), first, count, Str(md, "name")}}};
  if (include_object == "Object") {
    row["object"] = event;
  } else if (include_object != "None") {
    row["object"] = {
        {"kind", "PartialObjectMetadata"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", md}};
  }
  return row;
}

}  // namespace

bool WantsTable(absl::string_view accept) {
  for (absl::string_view part : absl::StrSplit(accept, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::StrContains(part, "as=Table") && absl::StrContains(part, "g=meta.k8s.io") &&
        absl::StrContains(part, "v=v1") && !absl::StrContains(part, "v=v1beta1")) {
      return true;
    }
  }
  return false;
}

std::string HumanDuration(absl::Duration d) {
  if (d < absl::ZeroDuration()) {
    d = absl::ZeroDuration();
  }
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 120) {
    return absl::StrCat(s, "s");
  }
  const int64_t m = s / 60;
  if (m < 10) {
    return s % 60 == 0 ? absl::StrCat(m, "m") : absl::StrCat(m, "m", s % 60, "s");
  }
  if (m < 180) {
    return absl::StrCat(m, "m");
  }
  const int64_t h = m / 60;
  if (h < 8) {
    return m % 60 == 0 ? absl::StrCat(h, "h") : absl::StrCat(h, "h", m % 60, "m");
  }
  if (h < 48) {
    return absl::StrCat(h, "h");
  }
  return absl::StrCat(h / 24, "d");
}

json EventTable(const json& body, absl::Time now, absl::string_view include_object) {
  json table = {{"kind", "Table"},
                {"apiVersion", "meta.k8s.io/v1"},
                {"metadata", json::object()},
                {"columnDefinitions",
                 {Column("Last Seen", "string", 0, "When the event was last observed."),
                  Column("Type", "string", 0, "Normal or Warning."),
                  Column("Reason", "string", 0, "Why the event was written, in CamelCase."),
                  Column("Object", "string", 0, "The object the event is about."),
                  Column("Subobject", "string", 1, "The field path within the object."),
                  Column("Source", "string", 1, "The component that reported it."),
                  Column("Message", "string", 0, "What happened, for a human."),
                  Column("First Seen", "string", 1, "When the event was first observed."),
                  Column("Count", "integer", 1, "How often it was observed."),
                  Column("Name", "string", 1, "The event's name.")}},
                {"rows", json::array()}};
  if (body.contains("items")) {
    json md = body.value("metadata", json::object());
    table["metadata"] = md;
    for (const json& item : body["items"]) {
      table["rows"].push_back(Row(item, now, include_object));
    }
  } else {
    table["metadata"] = {
        {"resourceVersion", Str(body.value("metadata", json::object()), "resourceVersion")}};
    table["rows"].push_back(Row(body, now, include_object));
  }
  return table;
}

}  // namespace dralens::sim
