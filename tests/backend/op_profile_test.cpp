// OpProfile (graft bench --op-profile): every scope is counted under its op with its FLOPs, the
// table lists ops by time with their share, and a disabled scope (nullptr) records nothing.
// Pure host code: runs without a GPU.
#include "backend/cuda/op_profile.h"

#include <gtest/gtest.h>

#include <thread>

namespace graft {
namespace {

TEST(OpProfile, CountsScopesAndOrdersTheTableByTime) {
  int syncs = 0;
  OpProfile p([&] { ++syncs; });
  {
    OpProfile::Scope s(&p, "MatMul", 2e9);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < 3; ++i) OpProfile::Scope s(&p, "Add", 0);
  { OpProfile::Scope off(nullptr, "Ignored", 1); }
  EXPECT_EQ(syncs, 8) << "each scope waits for the device before and after";
  const std::string t = p.Table();
  ASSERT_NE(t.find("MatMul"), std::string::npos);
  EXPECT_LT(t.find("MatMul"), t.find("Add")) << "slowest first:\n" << t;
  EXPECT_NE(t.find("        3"), std::string::npos) << "Add counted 3 times:\n" << t;
  EXPECT_EQ(t.find("Ignored"), std::string::npos);
  EXPECT_NE(t.find("total"), std::string::npos);
  p.Clear();
  EXPECT_EQ(p.Table().find("MatMul"), std::string::npos);
}

// AddSince: what ran between a snapshot and now, phase by phase into one set of lines (graft
// bench's table of a decision's question pieces alone).
TEST(OpProfile, AddsWhatRanSinceASnapshot) {
  OpProfile p([] {});
  OpProfile::Lines phase;
  { OpProfile::Scope s(&p, "MatMul", 5); }
  for (int round = 0; round < 2; ++round) {
    const OpProfile::Lines before = p.lines();
    { OpProfile::Scope s(&p, "MatMul", 7); }
    { OpProfile::Scope s(&p, "Attention", 0); }
    OpProfile::AddSince(p.lines(), before, phase);
    { OpProfile::Scope s(&p, "Embed", 0); }  // outside the phase
  }
  EXPECT_EQ(phase.size(), 2u);
  EXPECT_EQ(phase["MatMul"].calls, 2);
  EXPECT_DOUBLE_EQ(phase["MatMul"].flops, 14);
  EXPECT_EQ(phase["Attention"].calls, 2);
  EXPECT_EQ(phase.count("Embed"), 0u);
  const std::string t = OpProfile::TableOf(phase);
  EXPECT_NE(t.find("Attention"), std::string::npos) << t;
  EXPECT_EQ(t.find("Embed"), std::string::npos) << t;
}

}  // namespace
}  // namespace graft
