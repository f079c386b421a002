// CpuOps: the reference backend. Plain loops, fp32 accumulation, multithreaded over
// independent outputs (rows, heads, output features) so results never depend on the thread
// count. Dot products use 16 partial sums over k mod 16 followed by a fixed pairwise tree:
// an order that depends only on the length K.
//
// Thread-safety: an instance may be used by one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.h"

namespace graft {

class CpuOps final : public Ops {
 public:
  CpuOps(ActDtype act, int threads) : act_(act), threads_(threads < 1 ? 1 : threads) {}

  ActDtype act_dtype() const override { return act_; }
  float* Alloc(int64_t n) override;
  size_t Mark() const override { return scratch_.size(); }
  void Release(size_t mark) override;
  void ToHost(const float* src, int64_t n, float* host_dst) override;
  void Embed(const Weight& table, const int32_t* ids, int n, float* out) override;
  // out_bf16 is written when given; the CPU reads no twins (Twins() is false), so MatMul's xb is
  // not read: x holds the same values.
  void RmsNorm(const float* x, const Weight& w, int64_t rows, int dim, float eps, NormKind kind, float* out,
               uint16_t* out_bf16 = nullptr) override;
  void MatMul(const float* x, int64_t m, const Weight& w, float* y, bool round_output,
              const uint16_t* xb = nullptr) override;
  void LoraAdd(const LoraArgs& a) override;
  const Weight& ExactWeight(const Weight& base, const std::vector<LoraModule>& modules) override;
  Status ReserveExact(int64_t elements) override;
  void TopK(const float* x, int64_t rows, int vocab, const float* temperature, int k, float* values,
            int32_t* ids) override;
  void CopyBlock(const float* src, int64_t src_stride, int64_t src_col, float* dst, int64_t dst_stride,
                 int64_t dst_col, int64_t rows, int64_t cols) override;
  void ScatterRows(const float* src, int64_t width, const int32_t* rows, int n, float* dst) override;
  void Rope(float* x, int n, int heads, int head_dim, int rot_dim, const int32_t* pos, const float* inv_freq,
            float attn_scale) override;
  void Attention(const AttentionArgs& a) override;
  void SiluMul(const float* gu, int64_t n, int64_t inter, float* out, uint16_t* out_bf16 = nullptr) override;
  void Add(float* x, const float* y, int64_t n) override;
  void SigmoidGateMul(float* x, const float* gate, int64_t gate_stride, int64_t rows, int64_t cols,
                      uint16_t* x_bf16 = nullptr) override;
  void CausalConvSilu(const float* x, int64_t x_stride, int n, int channels, const Weight& w, float* conv_state,
                      float* out) override;
  void GdnGates(const float* in, int64_t stride, int64_t b_col, int64_t a_col, int n, int hv, const Weight& a_log,
                const Weight& dt_bias, float* beta, float* g) override;
  void GdnCore(const GdnCoreArgs& a) override;
  void GatedRmsNorm(const float* x, const float* z, int64_t z_stride, int64_t z_col, int n, int hv, int dv,
                    const Weight& w, float eps, float* out, uint16_t* out_bf16 = nullptr) override;

  // Rounds to the activation dtype (identity in f32 mode).
  float R(float v) const;

  // Called with every MatMul's input and weight before the product (calibration statistics:
  // tools/calibration.h); empty: none. Never changes what MatMul computes.
  using MatMulObserver = std::function<void(const float* x, int64_t m, const Weight& w)>;
  void set_matmul_observer(MatMulObserver f) { observer_ = std::move(f); }

 private:
  void GdnCoreRaw(const GdnCoreArgs& a);  // GdnCore in bf16 mode (cpu_gdn.cpp)
  void MatMulColumns(const float* x, int64_t m, const Weight& w, float* y, int64_t ldy, int64_t col0, bool round_output);
  void MatMulFp8(const float* x, int64_t m, const QuantizedWeight& w, float* y, int64_t ldy, int64_t col0,
                 bool round_output);
  ActDtype act_;
  int threads_;
  MatMulObserver observer_;
  std::vector<std::unique_ptr<float[]>> scratch_;  // the scratch stack, one block per Alloc
  Weight exact_;                                    // ExactWeight's scratch
};

// Dot product with the fixed 16-lane order described above. Exposed for tests and for ops
// that must reduce in the same order as MatMul.
float DotF32(const float* a, const float* b, int64_t k);

}  // namespace graft
