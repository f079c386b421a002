#!/usr/bin/env python3
"""Checks that an adapter written by `graft adapter extract` loads in PEFT and computes what
graft computes. Runs where torch, transformers and peft are installed (the GPU machine).
Usage: scripts/check-peft-loads.py BASE_DIR ADAPTER_DIR GRAFT_LOGITS.safetensors INPUTS.safetensors
GRAFT_LOGITS comes from `graft logits --dtype float32 --adapter ADAPTER_DIR` on INPUTS.
"""
import json
import os
import sys

import torch
import transformers
from peft import PeftModel
from safetensors.torch import load_file


def main():
    base_dir, adapter_dir, graft_path, inputs_path = sys.argv[1:5]
    cfg = json.load(open(os.path.join(base_dir, "config.json")))
    if cfg["model_type"] == "qwen3_5":
        from transformers.models.qwen3_5 import Qwen3_5ForConditionalGeneration as cls
    else:
        cls = transformers.AutoModelForCausalLM
    model = cls.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager").eval()
    model = PeftModel.from_pretrained(model, adapter_dir).eval()
    graft = load_file(graft_path)
    worst, top, n = 0.0, 0, 0
    with torch.no_grad():
        for name, ids in load_file(inputs_path).items():
            ref = model(input_ids=ids.long().unsqueeze(0), use_cache=False).logits[0].float()
            g = graft[name]
            worst = max(worst, float((ref - g).abs().max() / ref.abs().max()))
            top += int((ref.argmax(-1) == g.argmax(-1)).sum())
            n += ref.shape[0]
    print(f"PEFT loaded {adapter_dir}: top-1 agreement with graft {top}/{n}, max |dlogit|/max|logit| {worst:.2e}")
    sys.exit(0 if top == n and worst < 1e-3 else 1)


if __name__ == "__main__":
    main()
