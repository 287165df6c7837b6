#include "src/common/status.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace dralens::common {
namespace {

absl::Status Fails() { return absl::NotFoundError("no such claim"); }
absl::StatusOr<int> Seven() { return 7; }
absl::StatusOr<int> Broken() { return absl::InternalError("boom"); }

absl::Status UsesMacros(int* out) {
  RETURN_IF_ERROR(absl::OkStatus());
  ASSIGN_OR_RETURN(int v, Seven());
  *out = v;
  RETURN_IF_ERROR_CTX(Fails(), "prepare claim ns/a");
  return absl::OkStatus();
}

absl::Status AssignFails() {
  ASSIGN_OR_RETURN(int v, Broken());
  (void)v;
  return absl::OkStatus();
}

TEST(StatusTest, AnnotatePrependsContextAndKeepsTheCode) {
  absl::Status s = Annotate(absl::UnavailableError("connection refused"), "get claim");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "get claim: connection refused");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

TEST(StatusTest, MacrosReturnEarlyWithContext) {
  int v = 0;
  absl::Status s = UsesMacros(&v);
  EXPECT_EQ(v, 7);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "prepare claim ns/a: no such claim");
  EXPECT_EQ(AssignFails().message(), "boom");
}

TEST(StatusTest, ErrnoStatusNamesOperationPathAndMapsTheCode) {
  absl::Status s = ErrnoStatus(ENOENT, "open", "/var/run/cdi/x.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "open /var/run/cdi/x.json: No such file or directory");
  EXPECT_EQ(ErrnoStatus(ENOSPC, "write").code(), absl::StatusCode::kResourceExhausted);
}

TEST(StatusTest, AnnotateKeepsPayloads) {
  absl::Status s = absl::UnavailableError("down");
  s.SetPayload("type.dralens.dev/test", absl::Cord("503"));
  absl::Status annotated = Annotate(s, "get claim");
  EXPECT_EQ(annotated.message(), "get claim: down");
  ASSERT_TRUE(annotated.GetPayload("type.dralens.dev/test").has_value());
  EXPECT_EQ(*annotated.GetPayload("type.dralens.dev/test"), "503");
}

}  // namespace
}  // namespace dralens::common
