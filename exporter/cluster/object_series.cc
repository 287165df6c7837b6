#include "exporter/cluster/object_series.h"

#include <algorithm>
#include <utility>

#include "src/common/fnv.h"
#include "src/telemetry/catalog.h"

namespace dralens::exporter::cluster {

ObjectSeries::ObjectSeries(const std::string& name, common::Clock* clock)
    : name_(name),
      help_(telemetry::Spec(name).help),
      clock_(clock != nullptr ? *clock : common::RealClock()) {}

double ObjectSeries::Age(const Series& series, absl::Time now) {
  return std::max(0.0, absl::ToDoubleSeconds(now - series.since));
}

ObjectSeries::Probe ObjectSeries::PlaceOf(absl::string_view key) {
  return Probe{common::Fnv1a64(key), key};
}

void ObjectSeries::Set(const std::string& key, std::vector<prometheus::ClientMetric::Label> labels,
                       absl::Time since) {
  std::string text = telemetry::LabelText(labels);
  const Probe place = PlaceOf(key);
  absl::MutexLock lock(&mu_);
  auto it = series_.lower_bound(place);
  if (it != series_.end() && !Order()(place, *it)) {
    it->series->since = since;
    it->series->text = std::move(text);
    return;
  }
  series_.insert(it,
                 Slot{place.hash, std::make_unique<Series>(Series{key, since, std::move(text)})});
}

void ObjectSeries::Erase(const std::string& key) {
  const Probe place = PlaceOf(key);
  absl::MutexLock lock(&mu_);
  if (auto it = series_.find(place); it != series_.end()) {
    series_.erase(it);
  }
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
    for (const Slot& slot : series_) {
      prometheus::ClientMetric metric;
      metric.label = telemetry::LabelsOfText(slot.series->text);
      metric.gauge.value = Age(*slot.series, now);
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
      [&](std::string* buffer, const Slot& slot) {
        telemetry::AppendTextSample(buffer, name_, slot.series->text, Age(*slot.series, now));
      },
      [](const Slot& slot) {
        return Cursor{slot.hash, slot.series->key};
      });
}

}  // namespace dralens::exporter::cluster
