#include "src/telemetry/tracing/tracing_config.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/common/status.h"
#include "src/telemetry/tracing/otlp_http_exporter.h"

namespace dralens::telemetry {
namespace {

absl::string_view TrimSpaceTab(absl::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  return -1;
}

// RFC 9110 token characters, the only ones allowed in a header name.
bool IsHeaderName(absl::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || absl::StrContains("!#$%&'*+-.^_`|~", c);
  });
}

class Env {
 public:
  explicit Env(const GetEnvFunction& getenv) : getenv_(getenv) {}

  // The trimmed value, empty when unset.
  absl::string_view Get(const char* name) const {
    const char* value = getenv_(name);
    return value == nullptr ? absl::string_view() : absl::StripAsciiWhitespace(value);
  }

  // The first of `names` that is set and not empty, and its value.
  std::pair<const char*, absl::string_view> First(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      absl::string_view value = Get(name);
      if (!value.empty()) {
        return {name, value};
      }
    }
    return {*names.begin(), absl::string_view()};
  }

 private:
  const GetEnvFunction& getenv_;
};

absl::Status Invalid(absl::string_view name, absl::string_view value, absl::string_view allowed) {
  return absl::InvalidArgumentError(absl::StrCat(name, "=\"", value, "\" is invalid: ", allowed));
}

absl::StatusOr<int64_t> PositiveInt(const char* name, absl::string_view value, int64_t fallback,
                                    absl::string_view unit) {
  if (value.empty()) {
    return fallback;
  }
  int64_t n = 0;
  if (!std::all_of(value.begin(), value.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(value, &n) || n <= 0 || n > std::numeric_limits<int32_t>::max()) {
    return Invalid(name, value, absl::StrCat("use a positive integer (", unit, ")"));
  }
  return n;
}

absl::StatusOr<absl::Duration> Millis(const Env& env, const char* name, absl::Duration fallback) {
  ASSIGN_OR_RETURN(int64_t ms, PositiveInt(name, env.Get(name), absl::ToInt64Milliseconds(fallback),
                                           "milliseconds"));
  return absl::Milliseconds(ms);
}

absl::StatusOr<size_t> Count(const Env& env, const char* name, size_t fallback) {
  ASSIGN_OR_RETURN(int64_t n,
                   PositiveInt(name, env.Get(name), static_cast<int64_t>(fallback), "a count"));
  return static_cast<size_t>(n);
}

absl::StatusOr<std::string> TracesUrl(const Env& env, TracingConfig& config) {
  absl::string_view traces = env.Get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  if (!traces.empty()) {
    RETURN_IF_ERROR_CTX(ParseHttpUrl(traces).status(), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    return std::string(traces);
  }
  absl::string_view base = env.Get("OTEL_EXPORTER_OTLP_ENDPOINT");
  if (base.empty()) {
    config.enabled = false;
    config.disabled_reason =
        "neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set";
    return std::string();
  }
  RETURN_IF_ERROR_CTX(ParseHttpUrl(base).status(), "OTEL_EXPORTER_OTLP_ENDPOINT");
  if (absl::StrContains(base, '?')) {
    return Invalid("OTEL_EXPORTER_OTLP_ENDPOINT", base,
                   "a base URL takes no query (use OTEL_EXPORTER_OTLP_TRACES_ENDPOINT for a full "
                   "URL)");
  }
  while (absl::ConsumeSuffix(&base, "/")) {
  }
  return absl::StrCat(base, "/v1/traces");
}

absl::StatusOr<HeaderList> Headers(const Env& env) {
  HeaderList merged;
  for (const char* name : {"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}) {
    ASSIGN_OR_RETURN(HeaderList headers, ParseKeyValueList(env.Get(name), name));
    for (auto& [key, value] : headers) {
      if (!IsHeaderName(key)) {
        return Invalid(name, env.Get(name),
                       absl::StrCat("\"", key, "\" is not a valid HTTP header name"));
      }
      if (value.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
        return Invalid(name, env.Get(name),
                       absl::StrCat("the value of \"", key, "\" holds CR, LF or NUL"));
      }
      auto it = std::find_if(merged.begin(), merged.end(), [&header = key](const auto& h) {
        return absl::EqualsIgnoreCase(h.first, header);
      });
      if (it != merged.end()) {
        it->second = std::move(value);
      } else {
        merged.emplace_back(std::move(key), std::move(value));
      }
    }
  }
  return merged;
}

// The first of `names` that is set, checked to name a readable file.
absl::StatusOr<std::string> PemFile(const Env& env, std::initializer_list<const char*> names) {
  auto [name, value] = env.First(names);
  if (value.empty()) {
    return std::string();
  }
  std::ifstream file{std::string(value)};
  if (!file.good()) {
    return Invalid(name, value, "the file cannot be read");
  }
  return std::string(value);
}

absl::StatusOr<Attributes> ResourceAttributes(const Env& env,
                                              absl::string_view default_service_name) {
  ASSIGN_OR_RETURN(HeaderList pairs, ParseKeyValueList(env.Get("OTEL_RESOURCE_ATTRIBUTES"),
                                                       "OTEL_RESOURCE_ATTRIBUTES"));
  std::string service_name(default_service_name);
  Attributes attributes;
  for (auto& [key, value] : pairs) {
    if (key == "service.name") {
      service_name = value;
      continue;
    }
    auto it = std::find_if(attributes.begin(), attributes.end(),
                           [&name = key](const Attribute& a) { return a.key == name; });
    if (it != attributes.end()) {
      it->value = std::move(value);
    } else {
      attributes.push_back({std::move(key), std::move(value)});
    }
  }
  absl::string_view service_name_env = env.Get("OTEL_SERVICE_NAME");
  if (!service_name_env.empty()) {
    service_name = std::string(service_name_env);
  }
  attributes.insert(attributes.begin(), Attribute{"service.name", std::move(service_name)});
  return attributes;
}

absl::StatusOr<std::vector<std::string>> Propagators(const Env& env) {
  absl::string_view value = env.Get("OTEL_PROPAGATORS");
  if (value.empty()) {
    return std::vector<std::string>{"tracecontext", "baggage"};
  }
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    item = TrimSpaceTab(item);
    if (item == "tracecontext" || item == "baggage") {
      if (std::find(out.begin(), out.end(), item) == out.end()) {
        out.emplace_back(item);
      }
    } else if (item == "none") {
      if (value != "none") {
        return Invalid("OTEL_PROPAGATORS", value, "\"none\" must stand alone");
      }
    } else {
      return Invalid("OTEL_PROPAGATORS", value,
                     "dralens supports tracecontext, baggage or none (comma-separated)");
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> PercentDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    const int high = i + 1 < text.size() ? HexValue(text[i + 1]) : -1;
    const int low = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
    if (high < 0 || low < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad percent-escape at offset ", i, " in \"", text, "\""));
    }
    out.push_back(static_cast<char>(high << 4 | low));
    i += 2;
  }
  return out;
}

absl::StatusOr<HeaderList> ParseKeyValueList(absl::string_view text, absl::string_view variable) {
  HeaderList out;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    if (TrimSpaceTab(entry).empty()) {
      continue;
    }
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos) {
      return Invalid(variable, text,
                     absl::StrCat("entry \"", TrimSpaceTab(entry), "\" is not key=value"));
    }
    absl::StatusOr<std::string> key = PercentDecode(TrimSpaceTab(entry.substr(0, eq)));
    absl::StatusOr<std::string> value = PercentDecode(TrimSpaceTab(entry.substr(eq + 1)));
    if (!key.ok() || !value.ok()) {
      return Invalid(variable, text, common::Message(!key.ok() ? key.status() : value.status()));
    }
    if (key->empty()) {
      return Invalid(variable, text, "a key is empty");
    }
    out.emplace_back(*std::move(key), *std::move(value));
  }
  return out;
}

absl::StatusOr<TracingConfig> TracingConfigFromEnv(const GetEnvFunction& getenv,
                                                   absl::string_view default_service_name) {
  const Env env(getenv);
  TracingConfig config;
  absl::string_view disabled = env.Get("OTEL_SDK_DISABLED");
  if (absl::EqualsIgnoreCase(disabled, "true")) {
    config.enabled = false;
    config.disabled_reason = "OTEL_SDK_DISABLED=true";
    return config;
  }
  if (!disabled.empty() && !absl::EqualsIgnoreCase(disabled, "false")) {
    return Invalid("OTEL_SDK_DISABLED", disabled, "use true or false");
  }
  config.enabled = true;
  ASSIGN_OR_RETURN(config.traces_url, TracesUrl(env, config));

  auto [protocol_name, protocol] =
      env.First({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"});
  if (!protocol.empty() && protocol != "http/json") {
    return Invalid(protocol_name, protocol, "dralens exports http/json only");
  }
  ASSIGN_OR_RETURN(config.headers, Headers(env));

  const char* timeout_name =
      env.First({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"}).first;
  ASSIGN_OR_RETURN(config.export_timeout, Millis(env, timeout_name, config.export_timeout));

  auto [compression_name, compression] =
      env.First({"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"});
  if (compression == "gzip") {
    config.gzip = true;
  } else if (!compression.empty() && compression != "none") {
    return Invalid(compression_name, compression, "use gzip or none");
  }

  ASSIGN_OR_RETURN(config.ca_file, PemFile(env, {"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                                                 "OTEL_EXPORTER_OTLP_CERTIFICATE"}));
  ASSIGN_OR_RETURN(config.client_cert_file,
                   PemFile(env, {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
                                 "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"}));
  ASSIGN_OR_RETURN(config.client_key_file, PemFile(env, {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
                                                         "OTEL_EXPORTER_OTLP_CLIENT_KEY"}));
  if (config.client_cert_file.empty() != config.client_key_file.empty()) {
    return absl::InvalidArgumentError(
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY (or their "
        "TRACES_ forms) must be set together");
  }

  ASSIGN_OR_RETURN(config.resource_attributes, ResourceAttributes(env, default_service_name));
  ASSIGN_OR_RETURN(config.sampler, ParseSamplerConfig(getenv("OTEL_TRACES_SAMPLER"),
                                                      getenv("OTEL_TRACES_SAMPLER_ARG")));
  ASSIGN_OR_RETURN(config.propagators, Propagators(env));

  BatchSpanProcessorOptions& batch = config.batch;
  ASSIGN_OR_RETURN(batch.max_queue_size,
                   Count(env, "OTEL_BSP_MAX_QUEUE_SIZE", batch.max_queue_size));
  ASSIGN_OR_RETURN(batch.max_export_batch_size,
                   Count(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", batch.max_export_batch_size));
  ASSIGN_OR_RETURN(batch.schedule_delay,
                   Millis(env, "OTEL_BSP_SCHEDULE_DELAY", batch.schedule_delay));
  ASSIGN_OR_RETURN(batch.export_timeout,
                   Millis(env, "OTEL_BSP_EXPORT_TIMEOUT", batch.export_timeout));
  if (batch.max_export_batch_size > batch.max_queue_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=", batch.max_export_batch_size,
        " is invalid: it must not exceed OTEL_BSP_MAX_QUEUE_SIZE (", batch.max_queue_size, ")"));
  }
  return config;
}

}  // namespace dralens::telemetry
