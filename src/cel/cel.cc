#include "src/cel/cel.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/cel/internal.h"

namespace dralens::cel {

using namespace internal;  // NOLINT(build/namespaces)

absl::string_view ToString(Verdict verdict) {
  switch (verdict) {
    case Verdict::kTrue:
      return "true";
    case Verdict::kFalse:
      return "false";
    case Verdict::kUnknown:
      return "unknown";
  }
  return "unknown";
}

struct Program::Impl {
  std::string expression;
  NodePtr root;
};

absl::StatusOr<Program> Program::Compile(absl::string_view expression) {
  if (expression.size() > kMaxExpressionBytes) {
    return absl::InvalidArgumentError(absl::StrCat("expression is ", expression.size(),
                                                   " bytes, more than the API's limit of ",
                                                   kMaxExpressionBytes));
  }
  absl::StatusOr<std::vector<Token>> tokens = Lex(expression);
  if (!tokens.ok()) {
    return tokens.status();
  }
  absl::StatusOr<NodePtr> root = Parse(*std::move(tokens));
  if (!root.ok()) {
    return root.status();
  }
  std::vector<std::string> scope;
  if (absl::Status s = Resolve(**root, scope); !s.ok()) {
    return s;
  }
  auto impl = std::make_shared<Impl>();
  impl->expression = std::string(expression);
  impl->root = *std::move(root);
  return Program(std::move(impl));
}

Outcome Program::Evaluate(const DeviceView& device) const {
  Context ctx{device, {}};
  Value result = Eval(*impl_->root, ctx);
  Outcome outcome;
  if (const bool* b = result.Get<bool>()) {
    outcome.verdict = *b ? Verdict::kTrue : Verdict::kFalse;
  } else if (const internal::Unsupported* u = result.Get<internal::Unsupported>()) {
    outcome.verdict = Verdict::kUnknown;
    outcome.detail = absl::StrCat("outside the supported CEL subset: ", u->construct);
  } else if (const Error* e = result.Get<Error>()) {
    outcome.verdict = Verdict::kFalse;
    outcome.runtime_error = true;
    outcome.detail = absl::StrCat("CEL runtime error: ", e->message);
  } else {
    outcome.verdict = Verdict::kFalse;
    outcome.runtime_error = true;
    outcome.detail = absl::StrCat("expression evaluates to ", TypeName(result), ", not bool");
  }
  return outcome;
}

const std::string& Program::expression() const { return impl_->expression; }

Program::Program(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
Program::~Program() = default;
Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;
Program::Program(const Program&) = default;
Program& Program::operator=(const Program&) = default;

}  // namespace dralens::cel
