#include "src/sim/selectors.h"

#include "gtest/gtest.h"

namespace dralens::sim {
namespace {

bool Match(const std::string& selector, const std::map<std::string, std::string>& labels) {
  absl::StatusOr<LabelSelector> s = LabelSelector::Parse(selector);
  EXPECT_TRUE(s.ok()) << selector << ": " << s.status();
  return s.ok() && s->Matches(labels);
}

TEST(LabelSelectorTest, Operators) {
  std::map<std::string, std::string> l = {{"tier", "gold"}, {"n", "5"}, {"a.io/x", "y"}};
  EXPECT_TRUE(Match("", l));
  EXPECT_TRUE(Match("tier=gold", l));
  EXPECT_TRUE(Match("tier==gold", l));
  EXPECT_FALSE(Match("tier!=gold", l));
  EXPECT_TRUE(Match("missing!=x", l));
  EXPECT_TRUE(Match("tier in (silver, gold)", l));
  EXPECT_FALSE(Match("tier notin (gold)", l));
  EXPECT_TRUE(Match("missing notin (gold)", l));
  EXPECT_TRUE(Match("a.io/x", l));
  EXPECT_TRUE(Match("!missing", l));
  EXPECT_FALSE(Match("!tier", l));
  EXPECT_TRUE(Match("n>3,n<6", l));
  EXPECT_FALSE(Match("n>5", l));
  EXPECT_TRUE(Match(" tier = gold , n ", l));
}

TEST(LabelSelectorTest, Errors) {
  for (const char* bad :
       {"tier===gold", "tier in gold", "-x=1", "x=-bad-", "n>abc", "a,,b", "x ~ y"}) {
    EXPECT_FALSE(LabelSelector::Parse(bad).ok()) << bad;
  }
}

TEST(FieldSelectorTest, ParseAndMatch) {
  absl::StatusOr<FieldSelector> s = FieldSelector::Parse("spec.nodeName=a,metadata.name!=b");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->Matches({{"spec.nodeName", "a"}, {"metadata.name", "c"}}));
  EXPECT_FALSE(s->Matches({{"spec.nodeName", "a"}, {"metadata.name", "b"}}));
  absl::StatusOr<FieldSelector> escaped = FieldSelector::Parse("f==a\\,b\\=c");
  ASSERT_TRUE(escaped.ok());
  ASSERT_EQ(escaped->terms().size(), 1u);
  EXPECT_EQ(escaped->terms()[0].value, "a,b=c");
  EXPECT_TRUE(FieldSelector::Parse("f=").ok());  // empty value matches absent fields
  EXPECT_FALSE(FieldSelector::Parse("novalue").ok());
  EXPECT_FALSE(FieldSelector::Parse("=x").ok());
  EXPECT_FALSE(FieldSelector::Parse("f=a=b").ok());
}

}  // namespace
}  // namespace dralens::sim
