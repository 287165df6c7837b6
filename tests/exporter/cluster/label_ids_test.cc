#include "exporter/cluster/label_ids.h"

#include <string>

#include "gtest/gtest.h"

namespace dralens::exporter::cluster {
namespace {

TEST(LabelIdsTest, IdsAreDenseStableAndRoundTrip) {
  LabelIds ids;
  const uint32_t empty = ids.Id("");
  const uint32_t h100 = ids.Id("NVIDIA H100 80GB HBM3");
  const uint32_t a100 = ids.Id("A100");
  EXPECT_EQ(empty, 0u);
  EXPECT_EQ(h100, 1u);
  EXPECT_EQ(a100, 2u);
  std::string again = "NVIDIA H100 80GB HBM3";
  EXPECT_EQ(ids.Id(again), h100);
  // Values stay where they are while the table grows.
  const std::string* value = &ids.Value(h100);
  for (int i = 0; i < 10000; ++i) {
    ids.Id("ns-" + std::to_string(i));
  }
  EXPECT_EQ(&ids.Value(h100), value);
  EXPECT_EQ(ids.Value(h100), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(ids.Value(empty), "");
  EXPECT_EQ(ids.size(), 10003u);
  EXPECT_EQ(ids.Value(ids.Id("ns-9999")), "ns-9999");
}

TEST(LabelTableTest, SumsByKeyAndErases) {
  LabelTable<double> table;
  const LabelKey a = {{1, 2, 0}};
  const LabelKey b = {{1, 2, 1}};
  table[a] += 0.5;
  table[b] += 1;
  table[a] += 0.25;
  ASSERT_EQ(table.size(), 2u);
  ASSERT_NE(table.Find(a), nullptr);
  EXPECT_DOUBLE_EQ(*table.Find(a), 0.75);
  EXPECT_TRUE(table.Contains(b));
  EXPECT_FALSE(table.Contains(LabelKey{{1, 2, 2}}));
  table.EraseIf([](const LabelKey& key, double) { return key[2] == 1; });
  EXPECT_FALSE(table.Contains(b));
  EXPECT_EQ(table.size(), 1u);
  EXPECT_LT(a, b);  // ordered, for a stable order of series creation
}

}  // namespace
}  // namespace dralens::exporter::cluster
