// Exemplars for prometheus-cpp series, which (in 1.0.1) have no place to keep them.
//
// An ExemplarStore maps a series (family name + label set) to one slot per histogram bucket, or
// one slot for a counter, each holding the latest observation made with a trace id. The
// exposition writer looks the slots up while rendering; instruments write them as they observe.
//
//   auto& family = prometheus::BuildHistogram().Name("x_seconds").Register(*registry);
//   ExemplarHistogram h = ExemplarHistogram::Add(store, family, {{"result", "ok"}}, buckets);
//   h.Observe(0.42, span.context().trace_id.ToHex());
//
// OpenMetrics 1.0 allows exemplars on counters and histogram buckets only, with label names and
// values of at most 128 UTF-8 characters together; a `trace_id` label with 32 hex digits uses 40.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/labels.h"
#include "src/common/clock.h"

namespace dralens::telemetry {

// OpenMetrics 1.0: the exemplar's label names and values, together, in UTF-8 characters.
inline constexpr size_t kMaxExemplarLabelChars = 128;

struct Exemplar {
  std::string trace_id;  // 32 lowercase hex digits
  double value = 0;
  absl::Time timestamp;
  bool operator==(const Exemplar&) const = default;
};

// The exemplars of one series: one slot per bucket (histograms, +Inf last) or one (counters).
// Thread-safe.
class ExemplarSlots {
 public:
  explicit ExemplarSlots(size_t slots) : slots_(slots) {}
  void Set(size_t slot, Exemplar exemplar) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<Exemplar> Get(size_t slot) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const { return slots_.size(); }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::optional<Exemplar>> slots_ ABSL_GUARDED_BY(mu_);
};

// The canonical key of a series: `name{a="x",b="y"}` with labels sorted by name and values
// escaped as in the exposition format, so distinct series never share a key.
std::string SeriesKey(absl::string_view family, const prometheus::Labels& labels);

// Whether a trace id may be an exemplar label: 32 lowercase hex digits, not all zero (a no-op
// span's id is empty, so spans that were not sampled leave no exemplar).
bool IsExemplarTraceId(absl::string_view trace_id);

// Thread-safe. Slots live as long as the store holds them or an instrument refers to them.
class ExemplarStore {
 public:
  explicit ExemplarStore(common::Clock& clock = common::RealClock()) : clock_(clock) {}

  // Returns the slots of a series, creating them with `slots` entries on first use.
  std::shared_ptr<ExemplarSlots> Slots(absl::string_view family, const prometheus::Labels& labels,
                                       size_t slots) ABSL_LOCKS_EXCLUDED(mu_);
  // Looks up by the key SeriesKey() returns; nullptr when the series has none.
  std::shared_ptr<const ExemplarSlots> Find(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets a series' exemplars; call it when the series is removed from its family.
  void Remove(absl::string_view family, const prometheus::Labels& labels) ABSL_LOCKS_EXCLUDED(mu_);
  size_t SeriesCount() const ABSL_LOCKS_EXCLUDED(mu_);

  common::Clock& clock() const { return clock_; }

 private:
  common::Clock& clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ExemplarSlots>, std::less<>> series_ ABSL_GUARDED_BY(mu_);
};

// A prometheus-cpp histogram series plus its exemplar slots. Cheap to copy; the family and the
// store must outlive it.
class ExemplarHistogram {
 public:
  // Adds (or finds) the series `labels` in `family` with `buckets`, and its exemplar slots.
  static ExemplarHistogram Add(ExemplarStore& store,
                               prometheus::Family<prometheus::Histogram>& family,
                               const prometheus::Labels& labels,
                               const prometheus::Histogram::BucketBoundaries& buckets);

  void Observe(double value) { histogram_->Observe(value); }
  // Observes and, when `trace_id` is a valid trace id, makes this the exemplar of the bucket the
  // value falls in.
  void Observe(double value, absl::string_view trace_id);

 private:
  ExemplarHistogram(prometheus::Histogram* histogram, std::vector<double> bounds,
                    std::shared_ptr<ExemplarSlots> slots, common::Clock* clock)
      : histogram_(histogram),
        bounds_(std::move(bounds)),
        slots_(std::move(slots)),
        clock_(clock) {}

  prometheus::Histogram* histogram_;
  std::vector<double> bounds_;  // upper bounds, ascending, without +Inf
  std::shared_ptr<ExemplarSlots> slots_;
  common::Clock* clock_;
};

// A prometheus-cpp counter series plus its exemplar slot.
class ExemplarCounter {
 public:
  static ExemplarCounter Add(ExemplarStore& store, prometheus::Family<prometheus::Counter>& family,
                             const prometheus::Labels& labels);

  void Increment(double by = 1) { counter_->Increment(by); }
  // Increments and, when `trace_id` is valid, records the increment as the exemplar.
  void Increment(double by, absl::string_view trace_id);
  double Value() const { return counter_->Value(); }

 private:
  ExemplarCounter(prometheus::Counter* counter, std::shared_ptr<ExemplarSlots> slots,
                  common::Clock* clock)
      : counter_(counter), slots_(std::move(slots)), clock_(clock) {}

  prometheus::Counter* counter_;
  std::shared_ptr<ExemplarSlots> slots_;
  common::Clock* clock_;
};

}  // namespace dralens::telemetry
