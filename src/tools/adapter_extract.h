// `graft adapter extract`: a merged release plus its base in, a PEFT LoRA adapter out.
//
// The two checkpoints are streamed one projection at a time (peak memory near one projection,
// not a checkpoint): for every projection whose weights differ, the fp32 delta gets a truncated
// SVD at a fixed rank or at the rank that keeps a share of the spectral energy. Other tensors
// that differ (norms, embeddings, lm_head, conv, A_log, projections left out by the filters)
// are reported and, with store_full, stored whole in graft_full.safetensors; without it the
// extraction is refused, so nothing is dropped silently. With exact, graft_exact.safetensors
// also holds the residual that makes reconstruction bitwise equal to the merged bf16 weights
// (weights/exact.h), with factors stored in fp32, and the manifest's "default_mode" is
// "exact" (requests that name no mode are served exactly).
//
// Quantization-aware extraction (quantized_base): the adapter will be served on a quantized
// checkpoint of the base, so each changed projection's factors are fitted to merged minus the
// weight that checkpoint actually multiplies (WeightRows: W4A16 formats rounded to bf16, FP8
// code · scale) instead of merged minus the bf16 base — the pair served then lands closer to the
// release (LoftQ's idea at extraction time). Which projections to extract is still decided
// against the bf16 base (those the fine-tune changed); the manifest names the quantized
// checkpoint as the base (its identity), records the bf16 one, and the quality report runs the
// adapter on the quantized base. Not with exact (exact mode rebuilds bf16 weights).
//
// Calibrated extraction (calibration): each projection's factors are fitted to what it
// multiplies — tools/calibration.h collects the Gram matrix of every projection slot's inputs
// on a text, run through the model the adapter will be served on (the quantized base when
// given), and adapters/weighted_svd.h fits D's action on them. That model is loaded whole
// (before the streamed extraction, freed after the calibration run), as the quality report does. Combined with quantized_base it
// spends the rank on the part of the quantization error that reaches the outputs.
//
// Output: adapter_config.json + adapter_model.safetensors (standard PEFT: scale 1 per module
// through lora_alpha = rank), graft_manifest.json (identities, per-projection rank and
// relative error, SHA-256 of every stored tensor, the quality report).
#pragma once

#include <set>
#include <string>

#include "util/svd.h"
#include "util/status.h"

namespace graft {

struct ExtractJob {
  std::string merged, base, out;
  std::string quantized_base;     // fit to this quantized checkpoint of `base` (see above); empty: no
  RankChoice rank;
  std::set<std::string> modules;  // projection names ("q_proj", "in_proj_qkv", ...); empty = all
  std::set<int> layers;           // empty = all
  bool exact = false;
  int exact_iterations = 50;      // refit rounds (each one SVD) that shrink the exact residual
  bool store_full = false;
  bool float32_factors = false;   // default bf16 (exact forces fp32)
  std::string base_revision, merged_revision;
  std::string cache_dir;          // identity cache
  // Activation-aware fitting (adapters/weighted_svd.h): a text file whose tokens (the base's
  // tokenizer) the served model runs on to learn what each projection multiplies; the factors
  // then minimise the error on those inputs instead of in weight space. Empty: weight space.
  std::string calibration;
  int64_t calibration_tokens = 16384;
  int calibration_length = 512;   // tokens per calibration sequence
  double calibration_damp = 0.01; // δ = damp · mean of the Gram matrix's diagonal
  int eval_sequences = 4;         // quality report: token sequences of eval_length (0 = skip)
  int eval_length = 64;
  int threads = 2;
};

struct ExtractReport {
  int projections = 0;            // extracted
  int64_t adapter_bytes = 0;
  int64_t exact_residual_bytes = 0;
  int64_t exact_residual_elements = 0;
  int64_t touched_bf16_bytes = 0;  // a plain bf16 copy of the touched projections
  double mean_kl = -1, max_kl = -1, top1 = -1;
  int64_t peak_rss_kb = 0;
};

Result<ExtractReport> RunExtract(const ExtractJob& job);

// Peak resident set of this process so far (VmHWM), in KiB; 0 if unknown.
int64_t PeakRssKb();

}  // namespace graft
