// Calibration statistics for activation-aware extraction (`graft adapter extract
// --calibration`): what each projection of a model actually multiplies. The model runs on
// calibration text with the CPU backend in bf16 (as it is served), and for every layer's fused
// projection slot (LoraTarget) the Gram matrix of its input rows is accumulated,
//   G = Σ_rows x xᵀ  [K, K], in fp64,
// which adapters/weighted_svd.h turns into factors fitted to those inputs. Every projection of a
// slot (q, k and v of a fused qkv) shares the slot's input, so one matrix serves them all.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weights/lora.h"
#include "util/status.h"

namespace graft {

class Model;

struct InputGram {
  int64_t k = 0;          // input features
  int64_t rows = 0;       // calibration rows seen
  std::vector<double> g;  // [k, k], symmetric
};
using InputGrams = std::map<std::pair<int, LoraTarget>, InputGram>;  // by (layer, slot)

// Tokenizes text_file with `tokenizer_dir`/tokenizer.json, runs `model` on its first max_tokens
// tokens in sequences of seq_len, and returns every slot's Gram matrix. An unreadable or empty
// file, or text with no tokens, is an error naming it.
Result<InputGrams> CollectInputGrams(const Model& model, const std::string& tokenizer_dir, const std::string& text_file,
                                     int64_t max_tokens, int seq_len, int threads);

}  // namespace graft
