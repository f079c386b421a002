#include "tools/logits.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "util/bytes.h"
#include "util/progress.h"

namespace graft {

Status RunLogits(const Model& model, Ops& ops, const LogitsJob& job, const AdapterSet& adapters) {
  GRAFT_ASSIGN_OR_RETURN(SafetensorsFile in, SafetensorsFile::Open(job.input));
  if (in.tensors().empty()) return InvalidArgument(job.input + ": holds no token sequences");
  const int vocab = model.config().vocab_size;
  uint64_t total = 0;
  for (const auto& t : in.tensors()) {
    if (t.dtype != DType::kI32 || t.shape.size() != 1 || t.shape[0] == 0) {
      return InvalidArgument(fmt::format("{}: tensor '{}' must be a non-empty 1-D I32 token sequence (is {} [{}])",
                                         job.input, t.name, DTypeName(t.dtype), fmt::join(t.shape, ", ")));
    }
    total += static_cast<uint64_t>(t.shape[0]);
  }
  std::vector<TensorToWrite> out;
  Progress bar("logits", total, /*bytes=*/false);
  const auto start = std::chrono::steady_clock::now();
  for (const auto& t : in.tensors()) {
    const int n = static_cast<int>(t.shape[0]);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    CopyBytes(ids.data(), in.Data(t), ids.size() * 4);
    std::vector<float> logits(static_cast<size_t>(n) * vocab);
    GRAFT_ASSIGN_OR_RETURN(SequenceState st, model.NewState(ops));
    GRAFT_RETURN_IF_ERROR(model.Forward(ops, ids.data(), n, st, logits.data(), job.adapter_slot, &adapters).WithContext(
        fmt::format("{}: sequence '{}'", job.input, t.name)));
    TensorToWrite w{t.name, DType::kF32, {n, vocab}, {}};
    w.bytes.resize(logits.size() * 4);
    CopyBytes(w.bytes.data(), logits.data(), w.bytes.size());
    out.push_back(std::move(w));
    bar.Add(static_cast<uint64_t>(n));
  }
  bar.Finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("logits: {} sequences, {} tokens in {:.2f} s ({:.0f} tokens/s)", out.size(), total, secs,
               static_cast<double>(total) / std::max(secs, 1e-9));
  return WriteSafetensors(job.output, std::move(out));
}

}  // namespace graft
