// Paged KV and state slots: reference counts, copy-on-write forks that change no bits, and a
// fixed pool that refuses (without side effects) when it is full.
#include "kv/kv_pool.h"

#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "test_util.h"

namespace graft {
namespace {

TEST(KvPool, PagesAndSlotsAreCountedAndFixedPoolsRefuse) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  auto pool = model->NewPool(4, 3, 1, /*growable=*/false);
  EXPECT_GT(pool->bytes(), 0);
  auto a = pool->AllocatePage(), b = pool->AllocatePage(), c = pool->AllocatePage();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto d = pool->AllocatePage();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  pool->Retain(*a);
  pool->Release(*a);
  EXPECT_EQ(pool->refcount(*a), 1);
  pool->Release(*a);
  EXPECT_TRUE(pool->AllocatePage().ok());  // a came back
  auto s1 = model->NewState(*pool);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(model->NewState(*pool).status().code(), StatusCode::kResourceExhausted);  // one slot
}

// Pages and slots live in the PoolMemory handed in (a device backend hands in device memory):
// every block comes from it and goes back to it, bytes() counts them, and a model run on such
// a pool — growing it, forking a sequence — gives the bits it gives on the default pool.
class CountingMemory final : public PoolMemory {
 public:
  float* Allocate(int64_t n) override {
    ++live;
    allocated += n;
    return host.Allocate(n);
  }
  void Free(float* b) override {
    --live;
    host.Free(b);
  }
  void Copy(const float* s, float* d, int64_t n) override {
    ++copies;
    host.Copy(s, d, n);
  }
  void Zero(float* d, int64_t n) override { host.Zero(d, n); }
  HostPoolMemory host;
  int live = 0, copies = 0;
  int64_t allocated = 0;
};

TEST(KvPool, LivesInTheMemoryItIsGivenAndKeepsTheBits) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  auto ids = test::ReadIntTensors(test::Fixture("qwen3_5-wrapper") + "/inputs.safetensors").at("seq4");
  const int n = static_cast<int>(ids.size()), vocab = model->config().vocab_size;
  CpuOps ops(ActDtype::kBF16, 2);
  auto counting = std::make_shared<CountingMemory>();
  CountingMemory& mem = *counting;
  std::vector<float> a(static_cast<size_t>(n) * vocab), b(a.size()), fa(vocab), fb(vocab);
  {
    KvPool pool(model->config(), 4, 2, 1, /*growable=*/true, counting);
    EXPECT_GT(mem.live, 0);
    EXPECT_EQ(pool.bytes(), mem.allocated * 4);
    auto st = model->NewState(pool);
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(model->Forward(ops, ids.data(), n, *st, a.data()).ok());  // grows the pool: 130 tokens in 4-token pages
    auto fork = st->Fork();
    ASSERT_TRUE(fork.ok());
    int32_t next = 9;
    ASSERT_TRUE(model->Forward(ops, &next, 1, *fork, fa.data()).ok());
    EXPECT_GT(mem.copies, 0) << "growth, the slot copy and the copy-on-write page went through the memory";
  }
  EXPECT_EQ(mem.live, 0) << "the pool gave every block back";
  SequenceState st = model->NewState();
  ASSERT_TRUE(model->Forward(ops, ids.data(), n, st, b.data()).ok());
  int32_t next = 9;
  ASSERT_TRUE(model->Forward(ops, &next, 1, st, fb.data()).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(fa.data(), fb.data(), fa.size() * sizeof(float)), 0);
}

// A memory whose backend keeps KV values in 2 bytes (a device in bf16 mode) gets pages of half
// the floats: the pool's bytes, its per-token figure and every copy follow the memory's width.
class NarrowKvMemory final : public PoolMemory {
 public:
  float* Allocate(int64_t n) override {
    allocated += n;
    return host.Allocate(n);
  }
  void Free(float* b) override { host.Free(b); }
  void Copy(const float* s, float* d, int64_t n) override {
    copied += n;
    host.Copy(s, d, n);
  }
  void Zero(float* d, int64_t n) override { host.Zero(d, n); }
  int kv_value_bytes() const override { return 2; }
  HostPoolMemory host;
  int64_t allocated = 0, copied = 0;
};

TEST(KvPool, PagesTakeTheMemorysKvWidth) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  const ModelConfig& c = model->config();
  const int full = c.num_layers_of(LayerKind::kFullAttention);
  ASSERT_GT(full, 0);
  const int64_t row = int64_t{c.num_kv_heads} * c.head_dim;
  KvPool wide(c, 16, 8, 0, /*growable=*/false, nullptr);
  auto narrow_mem = std::make_shared<NarrowKvMemory>();
  KvPool narrow(c, 16, 8, 0, /*growable=*/false, narrow_mem);
  ASSERT_TRUE(wide.reserved().ok() && narrow.reserved().ok());
  EXPECT_EQ(wide.kv_value_bytes(), 4);
  EXPECT_EQ(narrow.kv_value_bytes(), 2);
  EXPECT_EQ(wide.kv_bytes_per_token(), 2 * row * 4 * full);
  EXPECT_EQ(narrow.kv_bytes_per_token(), 2 * row * 2 * full);
  EXPECT_EQ(narrow.bytes() * 2, wide.bytes()) << "no state slots: the pages are all of it";
  EXPECT_EQ(narrow_mem->allocated * 4, narrow.bytes());
  narrow.CopyPage(0, 1);
  EXPECT_EQ(narrow_mem->copied, int64_t{2} * full * 16 * row * 2 / 4) << "a page's K and V of every layer, in floats";
  // A page of an odd number of 2-byte values would end mid-float: refused, saying why.
  ModelConfig odd = c;
  odd.num_kv_heads = 1;
  odd.head_dim = 5;
  KvPool bad(odd, 3, 8, 0, /*growable=*/false, std::make_shared<NarrowKvMemory>());
  ASSERT_FALSE(bad.reserved().ok());
  EXPECT_NE(bad.reserved().message().find("not a whole number of 4-byte words"), std::string::npos)
      << bad.reserved().message();
}

TEST(KvPool, ForksShareThePrefixCopyOnWriteAndMatchLoneRuns) {
  for (const char* fixture : {"qwen3-tiny", "qwen3_5-wrapper"}) {
    auto model = test::LoadFixtureModel(fixture);
    ASSERT_NE(model, nullptr);
    auto pool = model->NewPool(16, 64, 8, /*growable=*/false);
    CpuOps ops(ActDtype::kBF16, 2);
    const int vocab = model->config().vocab_size;
    auto ids = test::ReadIntTensors(test::Fixture(std::string(fixture) + "/inputs.safetensors")).at("seq3");
    const std::vector<int32_t> prefix(ids.begin(), ids.begin() + 20);  // ends inside the second page
    const std::vector<int32_t> tail_a(ids.begin() + 20, ids.begin() + 40), tail_b(ids.begin() + 40, ids.begin() + 55);
    auto root = model->NewState(*pool);
    ASSERT_TRUE(root.ok());
    std::vector<float> scratch(64 * vocab);
    ASSERT_TRUE(model->Forward(ops, prefix.data(), 20, *root, scratch.data()).ok());
    const int free_before = pool->free_pages();
    auto fa = root->Fork(), fb = root->Fork();
    ASSERT_TRUE(fa.ok() && fb.ok());
    EXPECT_EQ(pool->free_pages(), free_before);  // forks share pages
    EXPECT_EQ(pool->refcount(root->pages[1]), 3);
    std::vector<float> la(tail_a.size() * vocab), lb(tail_b.size() * vocab);
    ASSERT_TRUE(model->Forward(ops, tail_a.data(), static_cast<int>(tail_a.size()), *fa, la.data()).ok());
    ASSERT_TRUE(model->Forward(ops, tail_b.data(), static_cast<int>(tail_b.size()), *fb, lb.data()).ok());
    EXPECT_NE(fa->pages[1], root->pages[1]);  // the shared partial page was copied before writing
    EXPECT_EQ(fa->pages[0], root->pages[0]);  // the full page is still shared
    auto lone = [&](const std::vector<int32_t>& tail) {
      std::vector<int32_t> all = prefix;
      all.insert(all.end(), tail.begin(), tail.end());
      const auto l = test::RunChunks(*model, ops, all, {});
      return std::vector<float>(l.end() - static_cast<long>(tail.size()) * vocab, l.end());
    };
    EXPECT_EQ(std::memcmp(la.data(), lone(tail_a).data(), la.size() * 4), 0) << fixture;
    EXPECT_EQ(std::memcmp(lb.data(), lone(tail_b).data(), lb.size() * 4), 0) << fixture;
  }
}

TEST(KvPool, AFullFixedPoolFailsTheStepAndLeavesTheStateAlone) {
  auto model = test::LoadFixtureModel("qwen3-tiny");
  ASSERT_NE(model, nullptr);
  auto pool = model->NewPool(4, 2, 0, /*growable=*/false);  // room for 8 positions
  CpuOps ops(ActDtype::kF32, 1);
  auto st = model->NewState(*pool);
  ASSERT_TRUE(st.ok());
  std::vector<int32_t> ids(9, 5);
  std::vector<float> logits(9 * 512);
  Status s = model->Forward(ops, ids.data(), 9, *st, logits.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("needs 3 KV pages but only 2 are free"), std::string::npos) << s.ToString();
  EXPECT_EQ(st->pos, 0);
  EXPECT_TRUE(st->pages.empty());
  EXPECT_TRUE(model->Forward(ops, ids.data(), 8, *st, logits.data()).ok());
  st->Clear();
  EXPECT_EQ(pool->free_pages(), 2);
}

// One pool for two kinds of work: each page and slot counts on the account that took it (a
// fork's and a copied page's too) until it is free again; an account's cap refuses past it as an
// empty pool would; a step short on one account asks the reclaimer, and fails changing nothing
// when it has nothing to give.
TEST(KvPool, AccountsCountTheirPagesAndSlotsAndKeepToTheirCaps) {
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  auto pool = model->NewPool(4, 10, 4, /*growable=*/false);
  CpuOps ops(ActDtype::kF32, 1);
  const int vocab = model->config().vocab_size;
  pool->set_page_cap(1, 4);
  pool->set_slot_cap(1, 2);
  EXPECT_EQ(pool->free_pages(1), 4);
  EXPECT_EQ(pool->free_pages(0), 10);
  auto chat = model->NewState(*pool, 0);
  auto dec = model->NewState(*pool, 1);
  ASSERT_TRUE(chat.ok() && dec.ok());
  EXPECT_EQ(pool->slots_held(0), 1);
  EXPECT_EQ(pool->slots_held(1), 1);
  std::vector<int32_t> ids(6, 5);
  std::vector<float> logits(6 * vocab);
  ASSERT_TRUE(model->Forward(ops, ids.data(), 6, *dec, logits.data()).ok());  // 2 pages on account 1
  ASSERT_TRUE(model->Forward(ops, ids.data(), 3, *chat, logits.data()).ok());  // 1 on account 0
  EXPECT_EQ(pool->pages_held(1), 2);
  EXPECT_EQ(pool->pages_held(0), 1);
  EXPECT_EQ(pool->free_pages(1), 2);
  auto fork = dec->Fork();  // shares both pages, takes account 1's second slot
  ASSERT_TRUE(fork.ok());
  EXPECT_EQ(fork->account, 1);
  EXPECT_EQ(pool->slots_held(1), 2);
  EXPECT_EQ(pool->pages_held(1), 2) << "shared pages count once";
  auto third = model->NewState(*pool, 1);
  ASSERT_FALSE(third.ok()) << "account 1 holds its cap of slots";
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  // The fork writes into the shared partial page: its copy counts on account 1 too.
  ASSERT_TRUE(model->Forward(ops, ids.data(), 1, *fork, logits.data()).ok());
  EXPECT_EQ(pool->pages_held(1), 3);
  // 8 more positions need 2 pages, 1 left under the cap: the step fails, nothing changes (no
  // reclaimer), though the pool has 6 free.
  std::vector<int32_t> more(8, 7);
  std::vector<float> more_logits(8 * vocab);
  Status s = model->Forward(ops, more.data(), 8, *dec, more_logits.data());
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(dec->pos, 6);
  EXPECT_EQ(pool->pages_held(1), 3);
  // A reclaimer that frees room for account 1 by letting the fork go: asked once, the step runs.
  int asked = 0;
  pool->set_reclaimer([&](int account) {
    ++asked;
    EXPECT_EQ(account, 1);
    if (fork->pool == nullptr) return false;
    fork->Clear();
    return true;
  });
  EXPECT_TRUE(model->Forward(ops, more.data(), 8, *dec, more_logits.data()).ok());
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(pool->pages_held(1), 4);
  EXPECT_EQ(pool->free_pages(1), 0);
  EXPECT_EQ(pool->free_pages(0), 5) << "10 pages: 4 on account 1, 1 on account 0";
  dec->Clear();
  chat->Clear();
  EXPECT_EQ(pool->pages_held(0) + pool->pages_held(1) + pool->slots_held(0) + pool->slots_held(1), 0);
  EXPECT_EQ(pool->free_pages(), 10);
}

TEST(KvPool, APoolPastTheMachineIsRefusedWithItsOwnError) {
  // --kv-tokens 1073741824 on the fixture: 67M pages, far more than any machine holds. The pool
  // says so (and nothing was touched); it does not throw std::bad_alloc.
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  ASSERT_NE(model, nullptr);
  KvPool pool(model->config(), 16, (1 << 30) / 16, 4, /*growable=*/false, nullptr);
  ASSERT_FALSE(pool.reserved().ok());
  EXPECT_EQ(pool.reserved().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(pool.reserved().message().find("no memory for 67108864 pages"), std::string::npos) << pool.reserved().message();
  EXPECT_EQ(pool.bytes(), 0);
  // The limit holds to the byte, and freeing gives it back.
  HostPoolMemory mem(1000);
  float* a = mem.Allocate(200);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a[199], 0.0f) << "blocks come zeroed";
  EXPECT_EQ(mem.Allocate(51), nullptr);
  float* b = mem.Allocate(50);
  EXPECT_NE(b, nullptr);
  mem.Free(a);
  EXPECT_NE(mem.Allocate(200), nullptr);
  EXPECT_GT(HostPoolMemory::MachineBytes(), int64_t{1} << 28);
}

}  // namespace
}  // namespace graft
