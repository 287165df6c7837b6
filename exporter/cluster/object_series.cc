#include "exporter/cluster/object_series.h"

#include <utility>

#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {

ObjectSeries::ObjectSeries(const std::string& name)
    : name_(name), help_(telemetry::Spec(name).help) {}

void ObjectSeries::Set(const std::string& key, std::vector<prometheus::ClientMetric::Label> labels,
                       double value) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  absl::MutexLock lock(&mu_);
  series_[key] = std::move(metric);
}

void ObjectSeries::SetValue(const std::string& key, double value) {
  absl::MutexLock lock(&mu_);
  if (auto it = series_.find(key); it != series_.end()) {
    it->second.gauge.value = value;
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
    for (const auto& [key, metric] : series_) {
      family.metric.push_back(metric);
    }
  }
  return {std::move(family)};
}

}  // namespace dralens::exporter::cluster
