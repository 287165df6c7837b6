// The price table: which price a device gets, and every way a price file can be wrong.
#include "exporter/cluster/pricing.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace dralens::exporter::cluster {
namespace {

using ::testing::HasSubstr;

TEST(PriceTableTest, ClassBeatsProductBeatsDefault) {
  auto table = PriceTable::Parse(R"({"default": 2.0,
                                     "deviceClasses": {"gpu.dralens.dev": 3.5},
                                     "products": {"NVIDIA H100 80GB HBM3": 4.0}})",
                                 /*default_price=*/9);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->PriceOf("gpu.dralens.dev", "NVIDIA H100 80GB HBM3"), 3.5);
  EXPECT_EQ(table->PriceOf("mig.dralens.dev", "NVIDIA H100 80GB HBM3"), 4.0);
  EXPECT_EQ(table->PriceOf("mig.dralens.dev", "NVIDIA A100-SXM4-40GB"), 2.0);
}

TEST(PriceTableTest, TheFlagPriceAppliesUnlessTheFileSetsADefault) {
  auto table = PriceTable::Parse(R"({"products": {"A": 1.5}})", /*default_price=*/2.25);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->PriceOf("any", "B"), 2.25);
  auto empty = PriceTable::Parse("{}", 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->PriceOf("any", "B"), 0);  // no price: no cost accrues
  auto none = PriceTable::Load("", 1.0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->PriceOf("any", "B"), 1.0);
}

TEST(PriceTableTest, BadFilesAreRefusedWithTheField) {
  struct Case {
    const char* text;
    const char* error;
  };
  for (const Case& c : {
           Case{"[]", "must be a JSON object"},
           Case{"{", "price file"},
           Case{R"({"default": -1})", "default: must be a number >= 0"},
           Case{R"({"default": "2"})", "default: must be a number >= 0"},
           Case{R"({"deviceClasses": []})", "deviceClasses: must be an object"},
           Case{R"({"products": {"H100": "x"}})", R"(products["H100"]: must be a number >= 0)"},
           Case{R"({"prices": {}})", "unknown field \"prices\""},
       }) {
    auto table = PriceTable::Parse(c.text, 0);
    ASSERT_FALSE(table.ok()) << c.text;
    EXPECT_THAT(std::string(table.status().message()), HasSubstr(c.error)) << c.text;
  }
}

TEST(PriceTableTest, LoadReadsTheFileAndNamesAMissingOne) {
  testing::TempDir dir;
  const std::string path = dir.Join("prices.json");
  std::ofstream(path) << R"({"default": 1.25})";
  auto table = PriceTable::Load(path, 0);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->PriceOf("c", "p"), 1.25);
  auto missing = PriceTable::Load(dir.Join("nope.json"), 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.json"));
}

}  // namespace
}  // namespace dralens::exporter::cluster
