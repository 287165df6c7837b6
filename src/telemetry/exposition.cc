#include "src/telemetry/exposition.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace dralens::telemetry {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

void AppendEscaped(std::string* out, absl::string_view text, bool escape_quotes) {
  for (char c : text) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && escape_quotes) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

// `name="value"` (value escaped), after a comma unless it is the first label.
void AppendLabel(std::string* out, bool first, absl::string_view name, absl::string_view value) {
  absl::StrAppend(out, first ? "" : ",", name, "=\"");
  AppendEscaped(out, value, /*escape_quotes=*/true);
  out->push_back('"');
}

// `{a="x",b="y"}`, plus an extra label (`le`, `quantile`) last when given; nothing for no labels.
void AppendLabels(std::string* out, const std::vector<ClientMetric::Label>& labels,
                  absl::string_view extra_name = "", absl::string_view extra_value = "") {
  if (labels.empty() && extra_name.empty()) {
    return;
  }
  out->push_back('{');
  for (size_t i = 0; i < labels.size(); ++i) {
    AppendLabel(out, i == 0, labels[i].name, labels[i].value);
  }
  if (!extra_name.empty()) {
    AppendLabel(out, labels.empty(), extra_name, extra_value);
  }
  out->push_back('}');
}

void AppendSample(std::string* out, absl::string_view name,
                  const std::vector<ClientMetric::Label>& labels, double value,
                  absl::string_view extra_name = "", absl::string_view extra_value = "") {
  out->append(name.data(), name.size());
  AppendLabels(out, labels, extra_name, extra_value);
  absl::StrAppend(out, " ", FormatValue(value));
}

// Seconds since the epoch with millisecond precision, e.g. "1700000000.123".
std::string FormatTimestamp(absl::Time t) {
  const int64_t ms = absl::ToUnixMillis(t);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%lld.%03lld", static_cast<long long>(ms / 1000),
                static_cast<long long>(ms % 1000));
  return buf;
}

void AppendExemplar(std::string* out, const std::optional<Exemplar>& exemplar) {
  if (!exemplar.has_value()) {
    return;
  }
  constexpr absl::string_view kLabel = "trace_id";
  if (kLabel.size() + exemplar->trace_id.size() > kMaxExemplarLabelChars) {
    return;
  }
  absl::StrAppend(out, " # {", kLabel, "=\"", exemplar->trace_id, "\"} ",
                  FormatValue(exemplar->value), " ", FormatTimestamp(exemplar->timestamp));
}

// The exemplar slots of one series, or null.
std::shared_ptr<const ExemplarSlots> SlotsOf(const ExemplarStore* store, const std::string& family,
                                             const ClientMetric& metric) {
  if (store == nullptr) {
    return nullptr;
  }
  prometheus::Labels labels;
  for (const ClientMetric::Label& l : metric.label) {
    labels[l.name] = l.value;
  }
  return store->Find(SeriesKey(family, labels));
}

bool IsInfoFamily(const MetricFamily& family) {
  if (family.type != MetricType::Gauge || !absl::EndsWith(family.name, "_info")) {
    return false;
  }
  for (const ClientMetric& m : family.metric) {
    if (m.gauge.value != 1) {
      return false;
    }
  }
  return true;
}

absl::string_view TypeName(MetricType type, bool openmetrics) {
  switch (type) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Summary:
      return "summary";
    case MetricType::Histogram:
      return "histogram";
    case MetricType::Untyped:
      return openmetrics ? "unknown" : "untyped";
  }
  return "untyped";
}

void AppendHeaderLines(std::string* out, absl::string_view name, absl::string_view type,
                       const std::string& help, bool om) {
  if (!help.empty()) {
    absl::StrAppend(out, "# HELP ", name, " ");
    AppendEscaped(out, help, /*escape_quotes=*/om);
    out->push_back('\n');
  }
  absl::StrAppend(out, "# TYPE ", name, " ", type, "\n");
}

void RenderFamily(std::string* out, const MetricFamily& family, const ExemplarStore* exemplars,
                  bool om) {
  // OpenMetrics names counter and info families without their sample suffix.
  std::string name = family.name;
  absl::string_view type = TypeName(family.type, om);
  std::string counter_sample = family.name;
  const bool info = om && IsInfoFamily(family);
  if (om && family.type == MetricType::Counter) {
    if (absl::EndsWith(name, "_total")) {
      name.resize(name.size() - 6);
    } else {
      counter_sample = absl::StrCat(name, "_total");
    }
  }
  if (info) {
    name.resize(name.size() - 5);
    type = "info";
  }
  AppendHeaderLines(out, name, type, family.help, om);

  // prometheus-cpp hands series out in hash order; sorting them by labels makes every scrape
  // list them the same way.
  std::vector<const ClientMetric*> series;
  series.reserve(family.metric.size());
  for (const ClientMetric& m : family.metric) {
    series.push_back(&m);
  }
  std::sort(series.begin(), series.end(),
            [](const ClientMetric* a, const ClientMetric* b) { return a->label < b->label; });
  for (const ClientMetric* metric : series) {
    const ClientMetric& m = *metric;
    switch (family.type) {
      case MetricType::Counter: {
        AppendSample(out, counter_sample, m.label, m.counter.value);
        if (om) {
          auto slots = SlotsOf(exemplars, family.name, m);
          if (slots != nullptr) {
            AppendExemplar(out, slots->Get(0));
          }
        }
        out->push_back('\n');
        break;
      }
      case MetricType::Gauge:
        AppendSample(out, family.name, m.label, m.gauge.value);
        out->push_back('\n');
        break;
      case MetricType::Untyped:
        AppendSample(out, family.name, m.label, m.untyped.value);
        out->push_back('\n');
        break;
      case MetricType::Summary: {
        for (const ClientMetric::Quantile& q : m.summary.quantile) {
          AppendSample(out, family.name, m.label, q.value, "quantile", FormatValue(q.quantile));
          out->push_back('\n');
        }
        AppendSample(out, family.name + "_sum", m.label, m.summary.sample_sum);
        out->push_back('\n');
        AppendSample(out, family.name + "_count", m.label,
                     static_cast<double>(m.summary.sample_count));
        out->push_back('\n');
        break;
      }
      case MetricType::Histogram: {
        auto slots = om ? SlotsOf(exemplars, family.name, m) : nullptr;
        const std::string bucket_name = family.name + "_bucket";
        size_t i = 0;
        bool has_inf = false;
        for (const ClientMetric::Bucket& b : m.histogram.bucket) {
          has_inf = has_inf || std::isinf(b.upper_bound);
          AppendSample(out, bucket_name, m.label, static_cast<double>(b.cumulative_count), "le",
                       FormatValue(b.upper_bound));
          if (slots != nullptr) {
            AppendExemplar(out, slots->Get(i));
          }
          out->push_back('\n');
          ++i;
        }
        if (!has_inf) {
          AppendSample(out, bucket_name, m.label, static_cast<double>(m.histogram.sample_count),
                       "le", "+Inf");
          out->push_back('\n');
        }
        AppendSample(out, family.name + "_sum", m.label, m.histogram.sample_sum);
        out->push_back('\n');
        AppendSample(out, family.name + "_count", m.label,
                     static_cast<double>(m.histogram.sample_count));
        out->push_back('\n');
        break;
      }
    }
  }
}

struct MediaRange {
  std::string type;  // lower case, e.g. "application/openmetrics-text"
  std::string version;
  double q = 1;
};

std::vector<MediaRange> ParseAccept(absl::string_view header) {
  std::vector<MediaRange> out;
  for (absl::string_view part : absl::StrSplit(header, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> fields = absl::StrSplit(part, ';');
    MediaRange range;
    range.type = absl::AsciiStrToLower(absl::StripAsciiWhitespace(fields[0]));
    bool ok = true;
    for (size_t i = 1; i < fields.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(fields[i], '=');
      const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(kv.first));
      absl::string_view value = absl::StripAsciiWhitespace(kv.second);
      value = absl::StripPrefix(absl::StripSuffix(value, "\""), "\"");
      if (key == "q") {
        ok = absl::SimpleAtod(value, &range.q) && range.q >= 0 && range.q <= 1;
      } else if (key == "version") {
        range.version = std::string(value);
      }
    }
    if (ok && !range.type.empty()) {
      out.push_back(std::move(range));
    }
  }
  return out;
}

}  // namespace

absl::string_view ContentType(ExpositionFormat format) {
  return format == ExpositionFormat::kOpenMetrics ? kOpenMetricsContentType
                                                  : kPrometheusTextContentType;
}

ExpositionFormat NegotiateFormat(absl::string_view accept) {
  double om = -1;
  double text = -1;
  for (const MediaRange& r : ParseAccept(accept)) {
    if (r.type == "application/openmetrics-text" &&
        (r.version.empty() || r.version == "1.0.0" || r.version == "0.0.1")) {
      om = std::max(om, r.q);
    } else if ((r.type == "text/plain" && (r.version.empty() || r.version == "0.0.4")) ||
               r.type == "text/*" || r.type == "*/*") {
      text = std::max(text, r.q);
    }
  }
  return om > 0 && om >= text ? ExpositionFormat::kOpenMetrics : ExpositionFormat::kPrometheusText;
}

bool AcceptsGzip(absl::string_view accept_encoding) {
  for (const MediaRange& r : ParseAccept(accept_encoding)) {
    if ((r.type == "gzip" || r.type == "x-gzip" || r.type == "*") && r.q > 0) {
      return true;
    }
  }
  return false;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value > 0 ? "+Inf" : "-Inf";
  }
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, ec == std::errc() ? end : buf);
}

void AppendHeader(std::string* out, const std::string& name, const std::string& help,
                  MetricType type, ExpositionFormat format) {
  const bool om = format == ExpositionFormat::kOpenMetrics;
  absl::string_view shown = name;
  if (om && type == MetricType::Counter) {
    absl::ConsumeSuffix(&shown, "_total");
  }
  AppendHeaderLines(out, shown, TypeName(type, om), help, om);
}

std::string LabelText(const std::vector<ClientMetric::Label>& labels) {
  std::string out;
  AppendLabels(&out, labels);
  return out;
}

std::string LabelTextOf(absl::Span<const LabelView> labels) {
  std::string out;
  if (labels.empty()) {
    return out;
  }
  out.push_back('{');
  for (size_t i = 0; i < labels.size(); ++i) {
    AppendLabel(&out, i == 0, labels[i].first, labels[i].second);
  }
  out.push_back('}');
  return out;
}

std::vector<ClientMetric::Label> LabelsOfText(absl::string_view text) {
  std::vector<prometheus::ClientMetric::Label> out;
  size_t i = text.empty() ? 0 : 1;  // past '{'
  while (i < text.size() && text[i] != '}') {
    const size_t eq = text.find('=', i);
    if (eq == absl::string_view::npos) {
      break;
    }
    ClientMetric::Label label;
    label.name = std::string(text.substr(i, eq - i));
    for (i = eq + 2; i < text.size() && text[i] != '"'; ++i) {  // past '="'
      if (text[i] == '\\' && i + 1 < text.size()) {
        ++i;
        label.value.push_back(text[i] == 'n' ? '\n' : text[i]);
      } else {
        label.value.push_back(text[i]);
      }
    }
    out.push_back(std::move(label));
    i += 1;  // past the closing quote
    if (i < text.size() && text[i] == ',') {
      ++i;
    }
  }
  return out;
}

void AppendTextSample(std::string* out, absl::string_view name, absl::string_view label_text,
                      double value) {
  absl::StrAppend(out, name, label_text, " ", FormatValue(value), "\n");
}

TextWriter::TextWriter(size_t piece_bytes, std::function<bool(absl::string_view)> emit)
    : piece_bytes_(piece_bytes), emit_(std::move(emit)) {
  buffer_.reserve(piece_bytes_ + piece_bytes_ / 4);
}

bool TextWriter::Flush() {
  if (emit_ == nullptr) {
    return true;
  }
  if (!failed_ && !buffer_.empty() && !emit_(buffer_)) {
    failed_ = true;
  }
  buffer_.clear();
  return !failed_;
}

void RenderTo(const std::vector<MetricFamily>& families, const ExemplarStore* exemplars,
              ExpositionFormat format, const std::vector<const TextSource*>& sources,
              TextWriter& out) {
  const bool om = format == ExpositionFormat::kOpenMetrics;
  for (const MetricFamily& family : families) {
    if (family.metric.empty()) {
      continue;
    }
    RenderFamily(out.buffer(), family, exemplars, om);
    if (out.Full() && !out.Flush()) {
      return;
    }
  }
  for (const TextSource* source : sources) {
    source->AppendText(out, format);
    if (out.failed()) {
      return;
    }
  }
  if (om) {
    out.buffer()->append("# EOF\n");
  }
  out.Flush();
}

std::string Render(const std::vector<MetricFamily>& families, const ExemplarStore* exemplars,
                   ExpositionFormat format, const std::vector<const TextSource*>& sources) {
  TextWriter out;
  RenderTo(families, exemplars, format, sources, out);
  return out.Take();
}

}  // namespace dralens::telemetry
