#include "exporter/cluster/object_series.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {

ObjectSeries::ObjectSeries(const std::string& name)
    : name_(name), help_(telemetry::Spec(name).help) {}

void ObjectSeries::Set(const std::string& key, std::vector<prometheus::ClientMetric::Label> labels,
                       double value) {
  Series series;
  series.text = telemetry::LabelText(labels);
  series.value = value;
  absl::MutexLock lock(&mu_);
  series_[key] = std::move(series);
}

void ObjectSeries::SetValue(const std::string& key, double value) {
  absl::MutexLock lock(&mu_);
  if (auto it = series_.find(key); it != series_.end()) {
    it->second.value = value;
  }
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
  {
    absl::MutexLock lock(&mu_);
    if (series_.empty()) {
      return {};
    }
    family.metric.reserve(series_.size());
    for (const auto& [key, series] : series_) {
      prometheus::ClientMetric metric;
      metric.label = telemetry::LabelsOfText(series.text);
      metric.gauge.value = series.value;
      family.metric.push_back(std::move(metric));
    }
  }
  return {std::move(family)};
}

void ObjectSeries::AppendText(telemetry::TextWriter& out,
                              telemetry::ExpositionFormat format) const {
  telemetry::AppendInPieces(
      mu_, series_, out,
      [&](std::string* buffer) {
        telemetry::AppendHeader(buffer, name_, help_, prometheus::MetricType::Gauge, format);
      },
      [&](std::string* buffer, const std::string&, const Series& series) {
        telemetry::AppendTextSample(buffer, name_, series.text, series.value);
      });
}

}  // namespace dralens::exporter::cluster
