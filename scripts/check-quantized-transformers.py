#!/usr/bin/env python3
"""Does transformers load what `graft quantize` writes, and does it compute what graft computes?

    scripts/check-quantized-transformers.py BF16_DIR GRAFT_LOGITS_DIR QUANT_DIR [QUANT_DIR ...]

For each quantized checkpoint directory (written by graft quantize from BF16_DIR): load it with
AutoModelForCausalLM on the GPU, run the token sequences of BF16_DIR/inputs.safetensors (int32
1-D tensors; written here from random ids when absent), and compare the next-token
distributions with GRAFT_LOGITS_DIR/<name of QUANT_DIR>.safetensors (graft logits on the same
inputs, float32 activations) and with the bf16 model: mean KL and top-1 agreement. One line per
checkpoint; a checkpoint transformers cannot load (a missing quantization package, say) is
reported with the exception, not hidden. Runs on the GPU machine (torch, transformers,
safetensors); nothing here runs in CI.
"""
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def logits(model, ids):
    with torch.no_grad():
        return model(ids.long().unsqueeze(0).cuda()).logits[0].float().cpu()


def compare(p, q):
    lp, lq = torch.log_softmax(p, -1), torch.log_softmax(q, -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    top = (p.argmax(-1) == q.argmax(-1)).float()
    return kl.mean().item(), top.mean().item()


def main():
    bf16_dir, graft_dir, quant_dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    inputs = load_file(os.path.join(graft_dir, "inputs.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(bf16_dir, dtype=torch.float32).cuda().eval()
    ref = {k: logits(base, v) for k, v in inputs.items()}
    del base
    for qd in quant_dirs:
        name = os.path.basename(os.path.normpath(qd))
        try:
            model = AutoModelForCausalLM.from_pretrained(qd, dtype=torch.bfloat16, device_map="cuda").eval()
        except Exception as e:  # reported, not hidden
            print(f"{name}: transformers cannot load it: {type(e).__name__}: {str(e)[:300]}")
            continue
        graft = load_file(os.path.join(graft_dir, name + ".safetensors"))
        kl_g, top_g, kl_b, top_b = [], [], [], []
        for k, ids in inputs.items():
            t = logits(model, ids)
            a, b = compare(graft[k], t)
            kl_g.append(a), top_g.append(b)
            a, b = compare(ref[k], t)
            kl_b.append(a), top_b.append(b)
        n = len(kl_g)
        print(f"{name}: transformers loads it; vs graft (same checkpoint): mean KL {sum(kl_g) / n:.2e}, top-1 "
              f"{100 * sum(top_g) / n:.1f}%; vs the bf16 model: mean KL {sum(kl_b) / n:.2e}, top-1 {100 * sum(top_b) / n:.1f}%")
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
