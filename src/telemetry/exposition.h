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

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
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

// Where exposition text goes. Writers append to buffer(); once Full(), a source lets go of its
// locks and calls Flush(), which hands the buffer on (to the HTTP response) and empties it. A
// scrape then holds one piece of the body at a time instead of the whole body (14 MB at 100k
// claims), and leaves no copies of a growing body behind in the malloc arenas of the server's
// threads. A writer made without `emit` keeps everything: Full() never holds, Take() is the body.
class TextWriter {
 public:
  TextWriter() = default;
  // `emit` takes each piece; false means the receiver is gone (the client hung up).
  TextWriter(size_t piece_bytes, std::function<bool(absl::string_view)> emit);

  std::string* buffer() { return &buffer_; }
  bool Full() const { return emit_ != nullptr && buffer_.size() >= piece_bytes_; }
  // Hands the buffer on and empties it; false, then and ever after, once `emit` failed, and
  // nothing is handed on any more. Without `emit`, keeps the buffer and returns true.
  bool Flush();
  bool failed() const { return failed_; }
  // What is buffered (the whole text, for a writer without `emit`), taken out of the writer.
  std::string Take() { return std::move(buffer_); }

 private:
  size_t piece_bytes_ = 0;
  std::function<bool(absl::string_view)> emit_;
  std::string buffer_;
  bool failed_ = false;
};

// Families that write their own exposition text (src/telemetry/text_family.h): HELP, TYPE and
// samples, complete, in the format asked; nothing for a family without series. A source holds
// its locks only while it fills a piece of `out` (AppendInPieces), never while a piece is
// handed on to a client.
class TextSource {
 public:
  virtual ~TextSource() = default;
  virtual void AppendText(TextWriter& out, ExpositionFormat format) const = 0;
};

// Writes `series` (an ordered container guarded by `mu`) in its order: `header(out)` first,
// only when there are series, then `line(out, element)` for each, in pieces of `out`. `mu` is
// held while a piece is filled and released before it is handed on; the next piece resumes
// after the last element written, found again by `series.upper_bound(cursor_of(element))`
// (a cursor that owns what it compares by: that element may be gone by then), so a series
// added or removed in between is written or not as it falls, as it would be by the next scrape.
template <typename Container, typename Header, typename Line, typename CursorOf>
void AppendInPieces(absl::Mutex& mu, const Container& series, TextWriter& out, const Header& header,
                    const Line& line, const CursorOf& cursor_of) {
  std::optional<std::decay_t<decltype(cursor_of(*series.begin()))>> after;
  bool started = false;
  while (!out.failed()) {
    {
      absl::MutexLock lock(&mu);
      auto it = after.has_value() ? series.upper_bound(*after) : series.begin();
      if (!started) {
        if (series.empty()) {
          return;
        }
        header(out.buffer());
        started = true;
      }
      bool full = false;
      while (it != series.end() && !full) {
        line(out.buffer(), *it);
        full = out.Full();
        if (full) {
          after = cursor_of(*it);
        }
        ++it;
      }
      if (it == series.end()) {
        return;
      }
    }
    out.Flush();
  }
}

// Renders `families` (as prometheus::Registry::Collect() returns them), then `sources`, to
// `out`; ends with Flush(). `exemplars` may be null; it is consulted only for OpenMetrics.
void RenderTo(const std::vector<prometheus::MetricFamily>& families, const ExemplarStore* exemplars,
              ExpositionFormat format, const std::vector<const TextSource*>& sources,
              TextWriter& out);
// The same, as one string.
std::string Render(const std::vector<prometheus::MetricFamily>& families,
                   const ExemplarStore* exemplars, ExpositionFormat format,
                   const std::vector<const TextSource*>& sources = {});

// The HELP and TYPE lines Render writes for a gauge or counter family named `name` (a counter's
// name ends in _total).
void AppendHeader(std::string* out, const std::string& name, const std::string& help,
                  prometheus::MetricType type, ExpositionFormat format);
// `{a="x",b="y"}` as Render writes a series' labels (values escaped); "" for none.
std::string LabelText(const std::vector<prometheus::ClientMetric::Label>& labels);
// The same from (name, value) views, written in the order given: pass the names sorted, as a
// prometheus::Labels map keeps them, for the text Render writes. Builds no strings but the text.
using LabelView = std::pair<absl::string_view, absl::string_view>;
std::string LabelTextOf(absl::Span<const LabelView> labels);
// The labels back from such a text (`{a="x",b="y\"z"}`, or "" for none): names end at '=',
// values are quoted, with \\, \" and \n unescaped.
std::vector<prometheus::ClientMetric::Label> LabelsOfText(absl::string_view text);

// A sample value as both formats write it: integers without a fraction, `+Inf`, `-Inf`, `NaN`,
// otherwise the shortest text that reads back as the same double.
std::string FormatValue(double value);
// One sample line from a series' rendered label text: `name{labels} value\n`.
void AppendTextSample(std::string* out, absl::string_view name, absl::string_view label_text,
                      double value);

}  // namespace dralens::telemetry
