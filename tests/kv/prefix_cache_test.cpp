// The prefix cache's bookkeeping: which entry a prompt continues from (whole entries with a
// recurrent state, common starts without), least-recently-used eviction, slots kept apart, and
// that entries hold pool room until they go.
#include "kv/prefix_cache.h"

#include <gtest/gtest.h>

#include "model/model.h"
#include "test_util.h"

namespace graft {
namespace {

// A state after `n` tokens in `pool` (pages taken for them; no forward pass needed here).
SequenceState After(const Model& model, KvPool& pool, int n) {
  SequenceState s = std::move(model.NewState(pool)).value();
  StepBatch b;
  std::vector<int32_t> ids(static_cast<size_t>(n), 1);
  b.Add(&s, ids.data(), n, 0);
  EXPECT_TRUE(model.ReserveRows(b).ok());
  s.pos = n;
  return s;
}

std::vector<int32_t> Ids(std::initializer_list<int32_t> l) { return l; }

TEST(PrefixCache, ARecurrentStateContinuesOnlyWhereItIsAWholePrefix) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");  // Gated DeltaNet layers: a slot each
  ASSERT_NE(model, nullptr);
  auto pool = model->NewPool(4, 32, 4, /*growable=*/false);
  PrefixCache cache(8);
  cache.Insert(0, Ids({1, 2, 3, 4, 5}), After(*model, *pool, 5));
  EXPECT_EQ(pool->free_slots(), 3) << "an entry holds its slot";
  SequenceState got;
  EXPECT_EQ(cache.Continue(0, Ids({1, 2, 3, 4, 5, 6, 7}), false, &got).value(), 5);
  EXPECT_EQ(got.pos, 5);
  EXPECT_NE(got.slot, -1);
  got.Clear();
  EXPECT_EQ(cache.Continue(0, Ids({1, 2, 3, 4, 5}), false, &got).value(), 0) << "the prompt's last token must run";
  EXPECT_EQ(cache.Continue(0, Ids({1, 2, 3, 9, 9, 9}), false, &got).value(), 0) << "a shared start is not enough";
  EXPECT_EQ(cache.Continue(1, Ids({1, 2, 3, 4, 5, 6}), false, &got).value(), 0) << "another adapter slot";
  // Cutting a recurrent state back is refused by the state itself.
  SequenceState whole = After(*model, *pool, 5);
  EXPECT_EQ(whole.ForkPrefix(3).status().code(), StatusCode::kInvalidArgument);
  whole.Clear();
  cache.ForgetSlot(0);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(pool->free_slots(), 4) << "a forgotten entry gives its slot back";
  EXPECT_EQ(pool->free_pages(), 32);
}

TEST(PrefixCache, AttentionCachesAreCutBackAndTheLeastRecentlyUsedGoesFirst) {
  auto model = test::LoadFixtureModel("qwen3-tiny");  // attention only: no slots
  ASSERT_NE(model, nullptr);
  auto pool = model->NewPool(4, 32, 0, /*growable=*/false);
  PrefixCache cache(2);
  cache.Insert(0, Ids({1, 2, 3, 4, 5, 6, 7, 8, 9}), After(*model, *pool, 9));
  cache.Insert(0, Ids({1, 2, 7}), After(*model, *pool, 3));
  SequenceState got;
  // The longest common start with any entry (not a whole entry), short of the prompt's end.
  EXPECT_EQ(cache.Continue(0, Ids({1, 2, 3, 4, 5, 6, 40}), true, &got).value(), 6);
  EXPECT_EQ(got.pos, 6);
  EXPECT_EQ(got.pages.size(), 2u) << "the pages of 6 tokens at 4 a page, shared";
  EXPECT_EQ(pool->refcount(got.pages[0]), 2);
  got.Clear();
  EXPECT_EQ(cache.Continue(0, Ids({1, 2, 3, 4, 5, 6, 7, 8, 9}), true, &got).value(), 8) << "a repeat: all but its last token";
  got.Clear();
  // Capacity 2: a third entry pushes out the least recently used ({1, 2, 7}: the other was just used).
  cache.Insert(0, Ids({5, 5, 5, 5}), After(*model, *pool, 4));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Continue(0, Ids({1, 2, 7, 8}), true, &got).value(), 2) << "{1, 2, 7} went: the long entry's start";
  got.Clear();
  // The same tokens again replace their entry.
  cache.Insert(0, Ids({5, 5, 5, 5}), After(*model, *pool, 4));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.EvictOldest());
  EXPECT_TRUE(cache.EvictOldest());
  EXPECT_FALSE(cache.EvictOldest());
  EXPECT_EQ(pool->free_pages(), 32) << "every page back";
  // A state whose length is not its tokens' is not kept; nor is anything at capacity 0.
  PrefixCache none(0);
  none.Insert(0, Ids({1, 2}), After(*model, *pool, 2));
  EXPECT_EQ(none.size(), 0u);
  cache.Insert(0, Ids({1, 2, 3}), After(*model, *pool, 2));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(pool->free_pages(), 32);
}

}  // namespace
}  // namespace graft
