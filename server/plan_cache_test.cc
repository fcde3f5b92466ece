// PlanCache: lookup, replacement, eviction by count and by bytes.
#include "server/plan_cache.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

PlanCache::Entry Plan(int64_t slice_bytes) {
  BuiltPlan p;
  p.trainer_slices.push_back(std::string(slice_bytes, 'x'));
  return std::make_shared<const absl::StatusOr<BuiltPlan>>(std::move(p));
}

TEST(PlanCacheTest, FindsWhatWasInserted) {
  PlanCache cache(16, 1000);
  EXPECT_EQ(cache.Find("a"), nullptr);
  auto p = Plan(10);
  cache.Insert("a", p);
  EXPECT_EQ(cache.Find("a"), p);
  EXPECT_EQ(cache.bytes(), 10);
  auto q = Plan(20);
  cache.Insert("a", q);  // replaces
  EXPECT_EQ(cache.Find("a"), q);
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.bytes(), 20);
}

TEST(PlanCacheTest, EvictsTheOldestBeyondTheEntryLimit) {
  PlanCache cache(2, 1000);
  cache.Insert("a", Plan(1));
  cache.Insert("b", Plan(1));
  cache.Insert("c", Plan(1));
  EXPECT_EQ(cache.Find("a"), nullptr);
  EXPECT_NE(cache.Find("b"), nullptr);
  EXPECT_NE(cache.Find("c"), nullptr);
}

TEST(PlanCacheTest, EvictsByBytesButKeepsTheNewestAlone) {
  PlanCache cache(16, 100);
  cache.Insert("a", Plan(60));
  cache.Insert("b", Plan(30));
  cache.Insert("c", Plan(50));  // a goes: 30 + 50 fit
  EXPECT_EQ(cache.Find("a"), nullptr);
  EXPECT_NE(cache.Find("b"), nullptr);
  cache.Insert("big", Plan(500));  // over the budget alone: kept, others out
  EXPECT_NE(cache.Find("big"), nullptr);
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.bytes(), 500);
}

TEST(PlanCacheTest, CachesFailedPlansAtNoBytes) {
  PlanCache cache(16, 100);
  cache.Insert("bad", std::make_shared<const absl::StatusOr<BuiltPlan>>(
                          absl::InvalidArgumentError("no")));
  ASSERT_NE(cache.Find("bad"), nullptr);
  EXPECT_FALSE(cache.Find("bad")->ok());
  EXPECT_EQ(cache.bytes(), 0);
}

}  // namespace
}  // namespace refit
