#include "tools/calibration.h"

#include <cblas.h>
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_ops.h"
#include "model/model.h"
#include "model/projections.h"
#include "tokenizer/tokenizer.h"
#include "util/progress.h"

namespace graft {

Result<InputGrams> CollectInputGrams(const Model& model, const std::string& tokenizer_dir, const std::string& text_file,
                                     int64_t max_tokens, int seq_len, int threads) {
  if (max_tokens <= 0 || seq_len <= 0) return InvalidArgument("calibration: token counts must be positive");
  std::ifstream in(text_file, std::ios::binary);
  if (!in) return NotFound(fmt::format("--calibration {}: cannot read it", text_file));
  GRAFT_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tok,
                         Tokenizer::FromFile((std::filesystem::path(tokenizer_dir) / "tokenizer.json").string()));
  // Tokenized in blocks of whole lines, only as far as max_tokens reach: a large corpus is
  // neither read whole nor tokenized past what the fit uses.
  constexpr size_t kBlockBytes = size_t{64} << 10;
  std::vector<int32_t> ids;
  std::string block, line;
  int64_t bytes = 0;
  while (static_cast<int64_t>(ids.size()) < max_tokens && (in.good() || !block.empty())) {
    if (std::getline(in, line)) {
      bytes += static_cast<int64_t>(line.size()) + (in.eof() ? 0 : 1);
      block += line;
      if (!in.eof()) block += '\n';
      if (block.size() < kBlockBytes && !in.eof()) continue;
    }
    if (block.empty()) break;
    GRAFT_ASSIGN_OR_RETURN(std::vector<int32_t> part, tok->Encode(block));
    ids.insert(ids.end(), part.begin(), part.end());
    block.clear();
  }
  if (bytes == 0) return InvalidArgument(fmt::format("--calibration {}: the file is empty", text_file));
  if (ids.empty()) return InvalidArgument(fmt::format("--calibration {}: no tokens in it", text_file));
  if (static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
  for (int32_t id : ids) {
    if (id < 0 || id >= model.config().vocab_size) {
      return InvalidArgument(fmt::format("--calibration {}: token {} is outside the model's vocabulary of {} (tokenizer {})",
                                         text_file, id, model.config().vocab_size, tokenizer_dir));
    }
  }

  // Which slot each fused weight is.
  InputGrams grams;
  std::map<const Weight*, std::pair<int, LoraTarget>> slot_of;
  const auto& layers = model.weights().layers;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t) {
      const Weight& w = FusedWeight(layers[static_cast<size_t>(l)], static_cast<LoraTarget>(t));
      if (w.rows == 0 || w.cols == 0) continue;
      slot_of[&w] = {l, static_cast<LoraTarget>(t)};
      InputGram& g = grams[{l, static_cast<LoraTarget>(t)}];
      g.k = w.cols;
      g.g.assign(static_cast<size_t>(w.cols * w.cols), 0.0);
    }
  }
  CpuOps ops(ActDtype::kBF16, threads);
  std::vector<double> xd;
  ops.set_matmul_observer([&](const float* x, int64_t m, const Weight& w) {
    auto it = slot_of.find(&w);
    if (it == slot_of.end()) return;
    InputGram& g = grams[it->second];
    xd.assign(x, x + m * g.k);
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(g.k), static_cast<int>(m), 1.0, xd.data(),
                static_cast<int>(g.k), 1.0, g.g.data(), static_cast<int>(g.k));
    g.rows += m;
  });
  Progress bar("calibrating", ids.size(), /*bytes=*/false);
  for (size_t s = 0; s < ids.size(); s += static_cast<size_t>(seq_len)) {
    const int n = static_cast<int>(std::min(ids.size() - s, static_cast<size_t>(seq_len)));
    SequenceState st = model.NewState();
    GRAFT_RETURN_IF_ERROR(model.Forward(ops, ids.data() + s, n, st, nullptr, 0, nullptr, LogitRows::None()));
    bar.Add(n);
  }
  for (auto& [key, g] : grams) {  // dsyrk filled the upper triangle
    for (int64_t i = 0; i < g.k; ++i)
      for (int64_t j = 0; j < i; ++j) g.g[static_cast<size_t>(i * g.k + j)] = g.g[static_cast<size_t>(j * g.k + i)];
  }
  return grams;
}

}  // namespace graft
