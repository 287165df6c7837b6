#include "exporter/cluster/object_series.h"

#include <algorithm>
#include <utility>

#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {

ObjectSeries::ObjectSeries(const std::string& name, common::Clock* clock)
    : name_(name),
      help_(telemetry::Spec(name).help),
      clock_(clock != nullptr ? *clock : common::RealClock()) {}

double ObjectSeries::Age(const Series& series, absl::Time now) {
  return std::max(0.0, absl::ToDoubleSeconds(now - series.since));
}

void ObjectSeries::Set(const std::string& key, std::vector<prometheus::ClientMetric::Label> labels,
                       absl::Time since) {
  Series series;
  series.text = telemetry::LabelText(labels);
  series.since = since;
  absl::MutexLock lock(&mu_);
  series_[key] = std::move(series);
}

void ObjectSeries::Erase(const std::string& key) {
  absl::MutexLock lock(&mu_);
  series_.erase(key);
}

size_t ObjectSeries::size() const {
  absl::MutexLock lock(&mu_);
  return series_.size();
}

std::vector<prometheus::MetricFamily> ObjectSeries::Collect() const {
  prometheus::MetricFamily family;
  family.name = name_;
  family.help = help_;
  family.type = prometheus::MetricType::Gauge;
  const absl::Time now = clock_.Now();
  {
    absl::MutexLock lock(&mu_);
    if (series_.empty()) {
      return {};
    }
    family.metric.reserve(series_.size());
    for (const auto& [key, series] : series_) {
      prometheus::ClientMetric metric;
      metric.label = telemetry::LabelsOfText(series.text);
      metric.gauge.value = Age(series, now);
      family.metric.push_back(std::move(metric));
    }
  }
  return {std::move(family)};
}

void ObjectSeries::AppendText(telemetry::TextWriter& out,
                              telemetry::ExpositionFormat format) const {
  // One time for the whole scrape, so that ages of one scrape are comparable.
  const absl::Time now = clock_.Now();
  telemetry::AppendInPieces(
      mu_, series_, out,
      [&](std::string* buffer) {
        telemetry::AppendHeader(buffer, name_, help_, prometheus::MetricType::Gauge, format);
      },
      [&](std::string* buffer, const auto& entry) {
        telemetry::AppendTextSample(buffer, name_, entry.second.text, Age(entry.second, now));
      },
      [](const auto& entry) { return entry.first; });
}

}  // namespace dralens::exporter::cluster
