#include "src/telemetry/tracing/in_memory_span_exporter.h"

#include <utility>

namespace dralens::telemetry {

std::vector<SpanData> InMemorySpanExporter::Storage::spans() const {
  absl::MutexLock lock(&mu_);
  return spans_;
}

std::vector<SpanData> InMemorySpanExporter::Storage::Take() {
  absl::MutexLock lock(&mu_);
  return std::exchange(spans_, {});
}

size_t InMemorySpanExporter::Storage::export_calls() const {
  absl::MutexLock lock(&mu_);
  return export_calls_;
}

ExportResult InMemorySpanExporter::Export(absl::Span<const SpanData> spans,
                                          absl::Duration) noexcept {
  absl::MutexLock lock(&storage_->mu_);
  ++storage_->export_calls_;
  if (storage_->shut_down_) {
    return {.success = false};
  }
  storage_->spans_.insert(storage_->spans_.end(), spans.begin(), spans.end());
  return {.success = true};
}

void InMemorySpanExporter::Shutdown() noexcept {
  absl::MutexLock lock(&storage_->mu_);
  storage_->shut_down_ = true;
}

}  // namespace dralens::telemetry
