// Pool sizes from a memory budget (engine/pool_plan.h): the rule's numbers at a Qwen3.5-27B's
// sizes on an 80 GB and a 141 GB card, explicit values kept, and budgets too small refused with
// what they leave.
#include "engine/pool_plan.h"

#include <gtest/gtest.h>

namespace graft {
namespace {

constexpr int64_t kGB = 1000LL * 1000 * 1000;

// Qwen3.5-27B in bf16 mode: 16 full-attention layers x 2 x 4 heads x 256 x 2 bytes; a state slot
// of its 48 Gated DeltaNet layers ~302 MB; a 262,144-token context.
PoolNeeds Qwen35_27b() { return {65536, 302 * 1000 * 1000, 262144, 16}; }

TEST(PoolPlan, SizesThePoolsFromWhatTheBudgetLeaves) {
  // An H100's default budget (90% of 80 GB) minus 54 GB of weights and 1 GB of scratch: ~16 GB.
  auto p = PlanPools(16 * kGB, Qwen35_27b(), {});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->max_running, 25) << "64 slots would take more than half: as many as half holds";
  EXPECT_EQ(p->max_decisions, 5) << "8 decisions' 15 slots would take more than a quarter: 12 slots";
  EXPECT_GE(p->decision_tokens, 30000) << "a 30K-token decision fits with the default flags";
  EXPECT_EQ(p->decision_tokens % 16, 0);
  EXPECT_EQ(p->kv_tokens % 16, 0);
  EXPECT_LE(p->decision_tokens, p->kv_tokens / 2) << "decisions hold at most half the pool";
  EXPECT_LE(p->bytes, 16 * kGB - 320 * 1000 * 1000) << "inside the budget, the margin kept";
  EXPECT_GT(p->bytes, 15 * kGB) << "and most of it used";
  // An H200 (130 GB budget): 64 chat slots; decisions may hold a whole-context record (more than a
  // quarter of the pool, less than half).
  auto q = PlanPools(60 * kGB, Qwen35_27b(), {});
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->max_running, 64);
  EXPECT_EQ(q->max_decisions, 8);
  EXPECT_GE(q->decision_tokens, 262144) << "a whole-context record";
  EXPECT_EQ(q->decision_tokens, 262144);
  EXPECT_GT(q->kv_tokens, 2 * 262144);
  EXPECT_NE(q->Describe().find("KV pool 533168 tokens (decisions hold up to 262144), 64 chat state slots"), std::string::npos) << q->Describe();
  EXPECT_NE(q->Describe().find("8 decisions at once"), std::string::npos) << q->Describe();
}

TEST(PoolPlan, KeepsExplicitValuesAndSizesTheRestAroundThem) {
  PoolAsk ask;
  ask.max_running = 4;
  ask.max_decisions = 2;
  ask.decision_tokens = 40000;
  auto p = PlanPools(16 * kGB, Qwen35_27b(), ask);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->max_running, 4);
  EXPECT_EQ(p->max_decisions, 2);
  EXPECT_EQ(p->decision_tokens, 40000);
  EXPECT_GT(p->kv_tokens, 140000) << "the pool takes the rest";
  ask.kv_tokens = 65536;
  auto q = PlanPools(16 * kGB, Qwen35_27b(), ask);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->kv_tokens, 65536);
  EXPECT_EQ(q->decision_tokens, 40000);
  EXPECT_EQ(q->bytes, (4 + DecisionSlots(2)) * int64_t{302 * 1000 * 1000} + 65536 * int64_t{65536});
  // Decisions' part of a pool asked for: its default follows the pool; more than the pool is refused.
  ask.decision_tokens = 0;
  auto r = PlanPools(16 * kGB, Qwen35_27b(), ask);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision_tokens, 65536 / 2) << "a quarter raised to the context where it fits in half: a half";
  ask.decision_tokens = 70000;
  auto over = PlanPools(16 * kGB, Qwen35_27b(), ask);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(), "--decision-kv-tokens 70000 is more than the KV pool it is a part of (--kv-tokens 65536)");
  // A model without recurrent layers: no slots to pay for, 64 running.
  PoolNeeds dense{262144, 0, 40960, 16};
  auto d = PlanPools(20 * kGB, dense, {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->max_running, 64);
  EXPECT_EQ(d->max_decisions, 8);
  EXPECT_GE(d->decision_tokens, 40960 / 2);
}

TEST(PoolPlan, RefusesBudgetsThatCannotHoldWhatIsAsked) {
  auto none = PlanPools(100 * 1000 * 1000, Qwen35_27b(), {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("--gpu-memory"), std::string::npos) << none.status().message();
  PoolAsk ask;
  ask.kv_tokens = 400000;
  ask.decision_tokens = 200000;
  auto big = PlanPools(16 * kGB, Qwen35_27b(), ask);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("400000 were asked for"), std::string::npos) << big.status().message();
  ask = {};
  ask.max_running = 60;  // and 12 decision slots: 72 slots, ~21.7 GB of state
  auto slots = PlanPools(16 * kGB, Qwen35_27b(), ask);
  ASSERT_FALSE(slots.ok());
  EXPECT_NE(slots.status().message().find("72 state slots"), std::string::npos) << slots.status().message();
}

}  // namespace
}  // namespace graft
