#include "engine/pool_plan.h"

#include <fmt/core.h>

#include <algorithm>

namespace graft {

namespace {
constexpr int kDefaultRunning = 64;
constexpr int kDefaultDecisions = 8;
std::string Gb(int64_t b) { return fmt::format("{:.2f} GB", static_cast<double>(b) / 1e9); }
}  // namespace

std::string PoolPlan::Describe() const {
  return fmt::format("KV pool {} tokens (decisions hold up to {}), {} chat state slots, {} decisions at once ({} in all)",
                     kv_tokens, decision_tokens, max_running, max_decisions, Gb(bytes));
}

Status CheckPoolAsk(const PoolAsk& ask) {
  if (ask.kv_tokens > 0 && ask.decision_tokens > ask.kv_tokens) {
    return InvalidArgument(fmt::format("--decision-kv-tokens {} is more than the KV pool it is a part of (--kv-tokens {})",
                                       ask.decision_tokens, ask.kv_tokens));
  }
  return Status::Ok();
}

Result<PoolPlan> PlanPools(int64_t available, const PoolNeeds& n, const PoolAsk& ask) {
  if (n.kv_bytes_per_token < 0 || n.slot_bytes < 0 || n.page_size <= 0 || ask.max_decisions < 0) {
    return InvalidArgument("pool plan: bad sizes");
  }
  const int64_t margin = std::max<int64_t>(available / 50, int64_t{256} << 20);
  const int64_t usable = available - margin;
  if (usable <= 0) {
    return ResourceExhausted(fmt::format("the memory budget leaves {} for KV and state pools after weights, adapters and "
                                         "scratch: nothing once a {} margin is kept (raise --gpu-memory or lower "
                                         "--gpu-scratch)", Gb(available), Gb(margin)));
  }
  PoolPlan p;
  p.max_running = ask.max_running;
  if (p.max_running == 0) {
    p.max_running = kDefaultRunning;
    if (n.slot_bytes > 0) {
      p.max_running = static_cast<int>(std::clamp<int64_t>(usable / 2 / n.slot_bytes, 1, kDefaultRunning));
    }
  }
  p.max_decisions = ask.max_decisions;
  if (p.max_decisions == 0) {
    p.max_decisions = kDefaultDecisions;
    while (p.max_decisions > 1 && DecisionSlots(p.max_decisions) * n.slot_bytes > usable / 4) --p.max_decisions;
  }
  const int decision_slots = DecisionSlots(p.max_decisions);
  const int64_t state = (int64_t{p.max_running} + decision_slots) * n.slot_bytes;
  const int64_t kv_room = usable - state;
  const int64_t per_token = std::max<int64_t>(n.kv_bytes_per_token, 1);
  // Whole pages of tokens.
  const auto pages_of = [&](int64_t tokens) { return tokens / n.page_size * n.page_size; };
  const int64_t tokens = kv_room > 0 ? pages_of(kv_room / per_token) : 0;
  GRAFT_RETURN_IF_ERROR(CheckPoolAsk(ask));
  if (kv_room <= 0 || tokens < 2 * n.page_size || ask.kv_tokens > tokens || ask.decision_tokens > tokens) {
    const int64_t asked = std::max(ask.kv_tokens, ask.decision_tokens);
    return ResourceExhausted(fmt::format(
        "the memory budget leaves {} for KV and state pools (after weights, adapters, scratch and a {} margin): {} state "
        "slots take {}, leaving KV for {} tokens at {} bytes a token{} (raise --gpu-memory, or lower --max-running, "
        "--max-decisions, --kv-tokens or --decision-kv-tokens)",
        Gb(usable), Gb(margin), p.max_running + decision_slots, Gb(state), std::max<int64_t>(tokens, 0), per_token,
        asked > 0 ? fmt::format("; {} were asked for", asked) : std::string()));
  }
  p.kv_tokens = ask.kv_tokens > 0 ? ask.kv_tokens : tokens;
  p.decision_tokens = ask.decision_tokens > 0
                          ? ask.decision_tokens
                          : std::max<int64_t>(pages_of(std::max<int64_t>(p.kv_tokens / 4, std::min<int64_t>(n.context, p.kv_tokens / 2))),
                                              n.page_size);
  p.bytes = state + p.kv_tokens * n.kv_bytes_per_token;
  return p;
}

}  // namespace graft
