#include "exporter/cluster/label_ids.h"

#include <string>
#include <vector>

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

// Past the entries it keeps inline, a table keeps every sum, copies and moves whole, and
// erasing from the middle keeps the rest in order.
TEST(LabelTableTest, GrowsPastItsInlineEntries) {
  LabelTable<double, 2> table;
  for (uint32_t i = 0; i < 9; ++i) {
    table[{{i}}] += i;
    table[{{i % 3}}] += 1;
  }
  ASSERT_EQ(table.size(), 9u);
  EXPECT_DOUBLE_EQ(*table.Find({{0}}), 3);
  EXPECT_DOUBLE_EQ(*table.Find({{2}}), 5);
  EXPECT_DOUBLE_EQ(*table.Find({{8}}), 8);
  const LabelTable<double, 2> copy = table;
  table.EraseIf([](const LabelKey& key, double) { return key[0] % 2 == 1; });
  std::vector<uint32_t> left;
  for (const auto& [key, value] : table) {
    left.push_back(key[0]);
  }
  EXPECT_EQ(left, (std::vector<uint32_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(copy.size(), 9u);
  LabelTable<double, 2> moved = std::move(table);
  EXPECT_EQ(moved.size(), 5u);
  EXPECT_DOUBLE_EQ(*moved.Find({{4}}), 4);
}

}  // namespace
}  // namespace dralens::exporter::cluster
