// InMemorySpanExporter: keeps every exported span, for tests that assert on spans.
#pragma once

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "src/telemetry/tracing/span_exporter.h"

namespace dralens::telemetry {

// Thread-safe. The exporter is usually owned by a processor, so tests keep the Storage:
//
//   auto exporter = std::make_unique<InMemorySpanExporter>();
//   auto storage = exporter->storage();
//   SimpleSpanProcessor processor(std::move(exporter), stats);
//   ... storage->spans() ...
class InMemorySpanExporter : public SpanExporter {
 public:
  class Storage {
   public:
    std::vector<SpanData> spans() const;
    // Returns the spans kept so far and forgets them.
    std::vector<SpanData> Take();
    // Export calls seen, successful or not.
    size_t export_calls() const;

   private:
    friend class InMemorySpanExporter;
    mutable absl::Mutex mu_;
    std::vector<SpanData> spans_ ABSL_GUARDED_BY(mu_);
    size_t export_calls_ ABSL_GUARDED_BY(mu_) = 0;
    bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  };

  InMemorySpanExporter() : storage_(std::make_shared<Storage>()) {}

  std::shared_ptr<Storage> storage() const { return storage_; }

  // SpanExporter: fails after Shutdown(), as a real exporter would.
  ExportResult Export(absl::Span<const SpanData> spans, absl::Duration timeout) noexcept override;
  void Shutdown() noexcept override;

 private:
  const std::shared_ptr<Storage> storage_;
};

}  // namespace dralens::telemetry
