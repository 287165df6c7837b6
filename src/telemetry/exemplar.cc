#include "src/telemetry/exemplar.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace dralens::telemetry {
namespace {

void AppendEscapedLabelValue(std::string* out, absl::string_view value) {
  for (char c : value) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '"':
        out->append("\\\"");
        break;
      case '\n':
        out->append("\\n");
        break;
      default:
        out->push_back(c);
    }
  }
}

}  // namespace

void ExemplarSlots::Set(size_t slot, Exemplar exemplar) {
  absl::MutexLock l(&mu_);
  if (slot < slots_.size()) {
    slots_[slot] = std::move(exemplar);
  }
}

std::optional<Exemplar> ExemplarSlots::Get(size_t slot) const {
  absl::MutexLock l(&mu_);
  return slot < slots_.size() ? slots_[slot] : std::nullopt;
}

std::string SeriesKey(absl::string_view family, const prometheus::Labels& labels) {
  // prometheus::Labels is a std::map: already sorted by name.
  std::string key(family);
  key.push_back('{');
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) {
      key.push_back(',');
    }
    first = false;
    absl::StrAppend(&key, name, "=\"");
    AppendEscapedLabelValue(&key, value);
    key.push_back('"');
  }
  key.push_back('}');
  return key;
}

bool IsExemplarTraceId(absl::string_view trace_id) {
  if (trace_id.size() != 32) {
    return false;
  }
  bool nonzero = false;
  for (char c : trace_id) {
    const bool hex = absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
    if (!hex) {
      return false;
    }
    nonzero = nonzero || c != '0';
  }
  return nonzero;
}

std::shared_ptr<ExemplarSlots> ExemplarStore::Slots(absl::string_view family,
                                                    const prometheus::Labels& labels,
                                                    size_t slots) {
  std::string key = SeriesKey(family, labels);
  absl::MutexLock l(&mu_);
  auto it = series_.find(key);
  if (it == series_.end()) {
    it = series_.emplace(std::move(key), std::make_shared<ExemplarSlots>(slots)).first;
  }
  return it->second;
}

std::shared_ptr<const ExemplarSlots> ExemplarStore::Find(const std::string& key) const {
  absl::MutexLock l(&mu_);
  auto it = series_.find(key);
  return it == series_.end() ? nullptr : it->second;
}

void ExemplarStore::Remove(absl::string_view family, const prometheus::Labels& labels) {
  const std::string key = SeriesKey(family, labels);
  absl::MutexLock l(&mu_);
  series_.erase(key);
}

size_t ExemplarStore::SeriesCount() const {
  absl::MutexLock l(&mu_);
  return series_.size();
}

ExemplarHistogram ExemplarHistogram::Add(ExemplarStore& store,
                                         prometheus::Family<prometheus::Histogram>& family,
                                         const prometheus::Labels& labels,
                                         const prometheus::Histogram::BucketBoundaries& buckets) {
  prometheus::Histogram& histogram = family.Add(labels, buckets);
  // The family's constant labels are part of the series as scraped.
  prometheus::Labels all = family.GetConstantLabels();
  all.insert(labels.begin(), labels.end());
  std::vector<double> bounds(buckets.begin(), buckets.end());
  std::sort(bounds.begin(), bounds.end());
  auto slots = store.Slots(family.GetName(), all, bounds.size() + 1);
  return ExemplarHistogram(&histogram, std::move(bounds), std::move(slots), &store.clock());
}

void ExemplarHistogram::Observe(double value, absl::string_view trace_id) {
  histogram_->Observe(value);
  if (!IsExemplarTraceId(trace_id)) {
    return;
  }
  // prometheus-cpp puts a value into the first bucket whose upper bound is >= the value.
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  slots_->Set(bucket, Exemplar{std::string(trace_id), value, clock_->Now()});
}

ExemplarCounter ExemplarCounter::Add(ExemplarStore& store,
                                     prometheus::Family<prometheus::Counter>& family,
                                     const prometheus::Labels& labels) {
  prometheus::Counter& counter = family.Add(labels);
  prometheus::Labels all = family.GetConstantLabels();
  all.insert(labels.begin(), labels.end());
  auto slots = store.Slots(family.GetName(), all, 1);
  return ExemplarCounter(&counter, std::move(slots), &store.clock());
}

void ExemplarCounter::Increment(double by, absl::string_view trace_id) {
  counter_->Increment(by);
  if (IsExemplarTraceId(trace_id)) {
    slots_->Set(0, Exemplar{std::string(trace_id), by, clock_->Now()});
  }
}

}  // namespace dralens::telemetry
