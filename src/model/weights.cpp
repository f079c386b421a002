#include "model/weights.h"

namespace graft {

int64_t ModelWeights::bytes() const {
  int64_t b = embed.bytes() + final_norm.bytes() + lm_head.bytes();
  for (const auto& l : layers) {
    for (const Weight* w : {&l.input_norm, &l.post_norm, &l.attn.qkv, &l.attn.o, &l.attn.q_norm, &l.attn.k_norm,
                            &l.gdn.in_proj, &l.gdn.conv, &l.gdn.a_log, &l.gdn.dt_bias, &l.gdn.norm, &l.gdn.out,
                            &l.gate_up, &l.down}) {
      b += w->bytes();
    }
  }
  return b;
}

}  // namespace graft
