// The exposition formats, written by us because prometheus-cpp 1.0.1 knows only the classic
// text format and has no exemplars:
//
//   Prometheus text 0.0.4   text/plain; version=0.0.4; charset=utf-8
//   OpenMetrics 1.0.0       application/openmetrics-text; version=1.0.0; charset=utf-8
//
// Differences the writer takes care of in OpenMetrics:
//   - a counter family is named without `_total` (`# TYPE foo counter`, sample `foo_total`);
//   - a gauge family named `*_info` whose samples are all 1 is an info family (`# TYPE foo info`,
//     sample `foo_info`); in classic text it stays a gauge;
//   - HELP text escapes `"` as well as `\` and newlines;
//   - exemplars follow counter and histogram bucket samples: `# {trace_id="…"} value timestamp`;
//   - the body ends with `# EOF`.
// Families with no series are left out (both formats), as prometheus-cpp's serializer does.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/metric_family.h"
#include "src/telemetry/exemplar.h"

namespace dralens::telemetry {

enum class ExpositionFormat { kPrometheusText, kOpenMetrics };

inline constexpr char kPrometheusTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr char kOpenMetricsContentType[] =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

absl::string_view ContentType(ExpositionFormat format);

// Picks the format from an HTTP Accept header by its q-values, as Prometheus expects:
// OpenMetrics (version 1.0.0, 0.0.1 or unversioned) when the client ranks it at least as high as
// the classic text; classic text otherwise, including for an empty or unparseable header.
ExpositionFormat NegotiateFormat(absl::string_view accept);

// Whether an Accept-Encoding header accepts gzip with a q-value above 0.
bool AcceptsGzip(absl::string_view accept_encoding);

// Families that write their own exposition text (src/telemetry/text_family.h): HELP, TYPE and
// samples, complete, in the format asked; nothing for a family without series.
class TextSource {
 public:
  virtual ~TextSource() = default;
  virtual void AppendText(std::string* out, ExpositionFormat format) const = 0;
};

// Renders `families` (as prometheus::Registry::Collect() returns them), then `sources`.
// `exemplars` may be null; it is consulted only for OpenMetrics.
std::string Render(const std::vector<prometheus::MetricFamily>& families,
                   const ExemplarStore* exemplars, ExpositionFormat format,
                   const std::vector<const TextSource*>& sources = {});

// The HELP and TYPE lines Render writes for a gauge or counter family named `name` (a counter's
// name ends in _total).
void AppendHeader(std::string* out, const std::string& name, const std::string& help,
                  prometheus::MetricType type, ExpositionFormat format);
// `{a="x",b="y"}` as Render writes a series' labels (values escaped); "" for none.
std::string LabelText(const std::vector<prometheus::ClientMetric::Label>& labels);
// The labels back from such a text (`{a="x",b="y\"z"}`, or "" for none): names end at '=',
// values are quoted, with \\, \" and \n unescaped.
std::vector<prometheus::ClientMetric::Label> LabelsOfText(absl::string_view text);

// A sample value as both formats write it: integers without a fraction, `+Inf`, `-Inf`, `NaN`,
// otherwise the shortest text that reads back as the same double.
std::string FormatValue(double value);

}  // namespace dralens::telemetry
