#include "weights/lora.h"

#include <algorithm>
#include <climits>

#include <fmt/core.h>

namespace graft {

const char* LoraTargetName(LoraTarget t) {
  switch (t) {
    case LoraTarget::kAttnQkv: return "attention q|k|v";
    case LoraTarget::kAttnO: return "attention o";
    case LoraTarget::kGdnIn: return "linear-attention in";
    case LoraTarget::kGdnOut: return "linear-attention out";
    case LoraTarget::kMlpGateUp: return "mlp gate|up";
    case LoraTarget::kMlpDown: return "mlp down";
    case LoraTarget::kCount: break;
  }
  return "?";
}

namespace {
template <typename F>
void ForEachModule(const LoraAdapter& a, F f) {
  for (const auto& l : a.layers) for (const auto& t : l.targets) for (const auto& m : t) f(m);
}
}  // namespace

int LoraAdapter::num_modules() const {
  int n = 0;
  ForEachModule(*this, [&](const LoraModule&) { ++n; });
  return n;
}

int LoraAdapter::min_rank() const {
  int r = INT_MAX;
  ForEachModule(*this, [&](const LoraModule& m) { r = std::min(r, m.rank); });
  return r == INT_MAX ? 0 : r;
}

int LoraAdapter::max_rank() const {
  int r = 0;
  ForEachModule(*this, [&](const LoraModule& m) { r = std::max(r, m.rank); });
  return r;
}

int64_t LoraAdapter::bytes() const {
  int64_t b = 0;
  ForEachModule(*this, [&](const LoraModule& m) { b += m.a.bytes() + m.b.bytes(); });
  return b;
}

std::string LoraAdapter::factor_storage() const {
  bool any_bf16 = false, any_f32 = false;
  ForEachModule(*this, [&](const LoraModule& m) {
    for (const Weight* w : {&m.a, &m.b}) (w->is_bf16 ? any_bf16 : any_f32) = true;
  });
  const std::string s = any_bf16 && any_f32 ? "bf16 and float32" : any_f32 ? "float32" : "bf16";
  return factors_rounded ? s + ", rounded from the checkpoint's float factors at load" : s;
}

int64_t LoraAdapter::exact_bytes() const {
  int64_t b = 0;
  ForEachModule(*this, [&](const LoraModule& m) { b += m.exact ? m.exact->bytes() : 0; });
  return b;
}

Status CheckMode(const std::string& mode) {
  if (mode.empty() || mode == "lora" || mode == "exact") return Status::Ok();
  return InvalidArgument(fmt::format("'mode' must be \"lora\" or \"exact\", not \"{}\"", mode.substr(0, 32)));
}

Result<int32_t> AdapterSlots::Select(const std::string& mode, const std::string& model) const {
  GRAFT_RETURN_IF_ERROR(CheckMode(mode));
  if (mode.empty()) return default_exact && exact >= 0 ? exact : lora;
  if (mode == "lora") return lora;
  if (exact < 0) {
    return InvalidArgument(fmt::format("'{}' has no exact representation, so it serves only \"mode\": \"lora\" "
                                       "(graft adapter extract --exact makes one)", model));
  }
  return exact;
}

}  // namespace graft
