#include "src/telemetry/text_family.h"

#include <stdexcept>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
T& TextFamily<T>::Add(const prometheus::Labels& labels) {
  std::string text = LabelText(ToVector(labels));
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = series_.try_emplace(std::move(text));
  if (inserted) {
    it->second = std::make_unique<T>();
    text_of_[it->second.get()] = &it->first;
  }
  return *it->second;
}

template <typename T>
void TextFamily<T>::Remove(T* metric) {
  absl::MutexLock lock(&mu_);
  auto it = text_of_.find(metric);
  if (it == text_of_.end()) {
    return;
  }
  const std::string text = *it->second;
  text_of_.erase(it);
  series_.erase(text);
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
      [&](std::string* buffer, const std::string& text, const std::unique_ptr<T>& metric) {
        AppendTextSample(buffer, name_, text, metric->Value());
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
  for (const auto& [text, metric] : series_) {
    prometheus::ClientMetric m;
    m.label = LabelsOfText(text);
    if constexpr (std::is_same_v<T, prometheus::Counter>) {
      m.counter.value = metric->Value();
    } else {
      m.gauge.value = metric->Value();
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
