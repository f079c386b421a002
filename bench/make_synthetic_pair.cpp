// Writes a synthetic base / merged checkpoint pair of real size (Qwen3 layout, random bf16
// weights, one shard per layer) for measuring `graft adapter extract` on several GB:
//   graft_synthetic_pair BASE_DIR MERGED_DIR [--hidden 4096] [--inter 12288] [--layers 8]
//                        [--heads 32] [--kv-heads 8] [--vocab 32000] [--rank 16]
// merged = bf16(base + B·A) on q_proj, v_proj and down_proj of every layer (rank `rank`).
#include <cblas.h>
#include <fmt/core.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/safetensors_writer.h"
#include "util/bf16.h"
#include "util/progress.h"

namespace {

uint64_t g_state = 0x9e3779b97f4a7c15ull;
float Uniform() {  // xorshift64*, in [-1, 1)
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  const uint64_t x = g_state * 2685821657736338717ull;
  return static_cast<float>((x >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

graft::TensorToWrite Random(const std::string& name, int64_t n, int64_t k, float scale) {
  graft::TensorToWrite t{name, graft::DType::kBF16, k ? std::vector<int64_t>{n, k} : std::vector<int64_t>{n}, {}};
  const int64_t count = k ? n * k : n;
  t.bytes.resize(static_cast<size_t>(count) * 2);
  auto* p = reinterpret_cast<uint16_t*>(t.bytes.data());
  for (int64_t i = 0; i < count; ++i) p[i] = graft::FloatToBf16(k ? Uniform() * scale : 1.0f + 0.1f * Uniform());
  return t;
}

graft::TensorToWrite AddLowRank(const graft::TensorToWrite& base, int rank) {
  const int64_t n = base.shape[0], k = base.shape[1];
  std::vector<float> a(static_cast<size_t>(rank * k)), b(static_cast<size_t>(n * rank)), d(static_cast<size_t>(n * k));
  for (auto& x : a) x = Uniform() * 0.05f;
  for (auto& x : b) x = Uniform() * 0.05f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, k, rank, 1.0f, b.data(), rank, a.data(), k, 0.0f, d.data(), k);
  graft::TensorToWrite m = base;
  auto* p = reinterpret_cast<uint16_t*>(m.bytes.data());
  for (int64_t i = 0; i < n * k; ++i) p[i] = graft::FloatToBf16(graft::Bf16ToFloat(p[i]) + d[i]);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: {} BASE_DIR MERGED_DIR [--hidden H] [--inter I] [--layers L] [--heads N] [--kv-heads N] "
                       "[--vocab V] [--rank R]\n", argv[0]);
    return 2;
  }
  std::map<std::string, int64_t> o = {{"--hidden", 4096}, {"--inter", 12288}, {"--layers", 8}, {"--heads", 32},
                                      {"--kv-heads", 8}, {"--vocab", 32000}, {"--rank", 16}};
  for (int i = 3; i + 1 < argc; i += 2) o[argv[i]] = std::stoll(argv[i + 1]);
  const int64_t H = o["--hidden"], I = o["--inter"], L = o["--layers"], nh = o["--heads"], nkv = o["--kv-heads"],
                V = o["--vocab"], hd = 128;
  const int R = static_cast<int>(o["--rank"]);
  const std::string dirs[2] = {argv[1], argv[2]};
  nlohmann::json cfg = {{"model_type", "qwen3"}, {"vocab_size", V}, {"hidden_size", H}, {"intermediate_size", I},
                        {"num_hidden_layers", L}, {"num_attention_heads", nh}, {"num_key_value_heads", nkv},
                        {"head_dim", hd}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1e6}, {"tie_word_embeddings", true},
                        {"max_position_embeddings", 4096}, {"hidden_act", "silu"}};
  nlohmann::json maps[2] = {nlohmann::json::object(), nlohmann::json::object()};
  uint64_t total[2] = {0, 0};
  for (const auto& d : dirs) {
    std::filesystem::create_directories(d);
    std::ofstream(std::filesystem::path(d) / "config.json") << cfg.dump(2);
  }
  graft::Progress bar("writing", static_cast<uint64_t>(L + 1), false);
  for (int64_t l = -1; l < L; ++l) {
    std::vector<graft::TensorToWrite> base;
    const std::string shard = l < 0 ? "model-embed.safetensors" : fmt::format("model-layer{:03d}.safetensors", l);
    if (l < 0) {
      base.push_back(Random("model.embed_tokens.weight", V, H, 0.05f));
      base.push_back(Random("model.norm.weight", H, 0, 0));
    } else {
      const std::string p = fmt::format("model.layers.{}.", l);
      const float s = 1.0f / std::sqrt(static_cast<float>(H));
      base.push_back(Random(p + "input_layernorm.weight", H, 0, 0));
      base.push_back(Random(p + "post_attention_layernorm.weight", H, 0, 0));
      base.push_back(Random(p + "self_attn.q_proj.weight", nh * hd, H, s));
      base.push_back(Random(p + "self_attn.k_proj.weight", nkv * hd, H, s));
      base.push_back(Random(p + "self_attn.v_proj.weight", nkv * hd, H, s));
      base.push_back(Random(p + "self_attn.o_proj.weight", H, nh * hd, s));
      base.push_back(Random(p + "self_attn.q_norm.weight", hd, 0, 0));
      base.push_back(Random(p + "self_attn.k_norm.weight", hd, 0, 0));
      base.push_back(Random(p + "mlp.gate_proj.weight", I, H, s));
      base.push_back(Random(p + "mlp.up_proj.weight", I, H, s));
      base.push_back(Random(p + "mlp.down_proj.weight", H, I, s));
    }
    std::vector<graft::TensorToWrite> merged;
    for (const auto& t : base) {
      const bool adapted = t.name.find("q_proj.weight") != std::string::npos || t.name.find("v_proj.weight") != std::string::npos ||
                           t.name.find("down_proj.weight") != std::string::npos;
      merged.push_back(adapted ? AddLowRank(t, R) : t);
    }
    for (int w = 0; w < 2; ++w) {
      auto& ts = w == 0 ? base : merged;
      for (const auto& t : ts) maps[w][t.name] = shard, total[w] += t.bytes.size();
      const auto st = graft::WriteSafetensors((std::filesystem::path(dirs[w]) / shard).string(), std::move(ts));
      if (!st.ok()) {
        fmt::print(stderr, "{}\n", st.ToString());
        return 1;
      }
    }
    bar.Add(1);
  }
  bar.Finish();
  for (int w = 0; w < 2; ++w) {
    std::ofstream(std::filesystem::path(dirs[w]) / "model.safetensors.index.json")
        << nlohmann::json{{"metadata", {{"total_size", total[w]}}}, {"weight_map", maps[w]}}.dump(1);
  }
  fmt::print("wrote {} and {}: {:.2f} GB each\n", dirs[0], dirs[1], total[0] / 1e9);
  return 0;
}
