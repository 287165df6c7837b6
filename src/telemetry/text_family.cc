#include "src/telemetry/text_family.h"

#include <stdexcept>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/fnv.h"
#include "src/telemetry/catalog.h"

namespace dralens::telemetry {
namespace {

template <typename T>
constexpr prometheus::MetricType TypeOf() {
  return std::is_same_v<T, prometheus::Counter> ? prometheus::MetricType::Counter
                                                : prometheus::MetricType::Gauge;
}

std::vector<prometheus::ClientMetric::Label> ToVector(const prometheus::Labels& labels) {
  std::vector<prometheus::ClientMetric::Label> out;
  out.reserve(labels.size());
  for (const auto& [name, value] : labels) {
    out.push_back({name, value});
  }
  return out;
}

}  // namespace

template <typename T>
TextFamily<T>::TextFamily(absl::string_view name) : name_(name), help_(Spec(name).help) {
  const MetricKind kind = Spec(name).kind;
  const bool counter = std::is_same_v<T, prometheus::Counter>;
  if (kind != (counter ? MetricKind::kCounter : MetricKind::kGauge) ||
      (counter && !absl::EndsWith(name, "_total"))) {
    throw std::logic_error(absl::StrCat("TextFamily: ", name, " is not a ",
                                        counter ? "counter ending in _total" : "gauge"));
  }
}

template <typename T>
bool TextFamily<T>::Order::operator()(const Slot& a, const Slot& b) const {
  return a.hash != b.hash ? a.hash < b.hash : a.series->text < b.series->text;
}

template <typename T>
bool TextFamily<T>::Order::operator()(const Slot& a, const Probe& b) const {
  return a.hash != b.hash ? a.hash < b.hash : absl::string_view(a.series->text) < b.text;
}

template <typename T>
bool TextFamily<T>::Order::operator()(const Probe& a, const Slot& b) const {
  return a.hash != b.hash ? a.hash < b.hash : a.text < absl::string_view(b.series->text);
}

template <typename T>
bool TextFamily<T>::Order::operator()(const Slot& a, const Cursor& b) const {
  return (*this)(a, Probe{b.hash, b.text});
}

template <typename T>
bool TextFamily<T>::Order::operator()(const Cursor& a, const Slot& b) const {
  return (*this)(Probe{a.hash, a.text}, b);
}

template <typename T>
T& TextFamily<T>::Add(const prometheus::Labels& labels) {
  return AddText(LabelText(ToVector(labels)));
}

template <typename T>
T& TextFamily<T>::AddText(std::string text) {
  const uint64_t hash = common::Fnv1a64(text);
  absl::MutexLock lock(&mu_);
  const Probe probe{hash, text};
  auto it = series_.lower_bound(probe);
  if (it == series_.end() || Order()(probe, *it)) {  // not there: added where the search ended
    it = series_.insert(it, Slot{hash, std::make_unique<Series>(std::move(text))});
    place_of_[&it->series->metric] = Probe{hash, it->series->text};
  }
  return it->series->metric;
}

template <typename T>
void TextFamily<T>::Remove(T* metric) {
  absl::MutexLock lock(&mu_);
  auto it = place_of_.find(metric);
  if (it == place_of_.end()) {
    return;
  }
  const Probe place = it->second;  // views the series' text, which the erase below destroys
  place_of_.erase(it);
  series_.erase(series_.find(place));
}

template <typename T>
size_t TextFamily<T>::size() const {
  absl::MutexLock lock(&mu_);
  return series_.size();
}

template <typename T>
void TextFamily<T>::AppendText(TextWriter& out, ExpositionFormat format) const {
  AppendInPieces(
      mu_, series_, out,
      [&](std::string* buffer) { AppendHeader(buffer, name_, help_, TypeOf<T>(), format); },
      [&](std::string* buffer, const Slot& slot) {
        AppendTextSample(buffer, name_, slot.series->text, slot.series->metric.Value());
      },
      [](const Slot& slot) {
        return Cursor{slot.hash, slot.series->text};
      });
}

template <typename T>
prometheus::MetricFamily TextFamily<T>::CollectFamily() const {
  prometheus::MetricFamily family;
  family.name = name_;
  family.help = help_;
  family.type = TypeOf<T>();
  absl::MutexLock lock(&mu_);
  family.metric.reserve(series_.size());
  for (const Slot& slot : series_) {
    prometheus::ClientMetric m;
    m.label = LabelsOfText(slot.series->text);
    if constexpr (std::is_same_v<T, prometheus::Counter>) {
      m.counter.value = slot.series->metric.Value();
    } else {
      m.gauge.value = slot.series->metric.Value();
    }
    family.metric.push_back(std::move(m));
  }
  return family;
}

template class TextFamily<prometheus::Gauge>;
template class TextFamily<prometheus::Counter>;

TextFamily<prometheus::Gauge>& TextFamilies::AddGauge(absl::string_view name) {
  auto family = std::make_unique<TextFamily<prometheus::Gauge>>(name);
  TextFamily<prometheus::Gauge>& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

TextFamily<prometheus::Counter>& TextFamilies::AddCounter(absl::string_view name) {
  auto family = std::make_unique<TextFamily<prometheus::Counter>>(name);
  TextFamily<prometheus::Counter>& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

void TextFamilies::AppendText(TextWriter& out, ExpositionFormat format) const {
  for (const auto& family : families_) {
    family->AppendText(out, format);
  }
}

std::vector<prometheus::MetricFamily> TextFamilies::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  for (const auto& family : families_) {
    prometheus::MetricFamily f = family->CollectFamily();
    if (!f.metric.empty()) {
      out.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace dralens::telemetry
