#!/usr/bin/env python3
"""PEFT LoRA adapters for the fixture models, PEFT's float32 logits with them, and each
adapter's merged checkpoint (merge_and_unload, saved in bf16) with its float32 logits.

Runs where torch, transformers (>= 5) and peft are installed (the GPU machine), from the
repository root, after scripts/make-fixtures.py's checkpoints exist under fixtures/.
Usage: scripts/make-adapter-fixtures.py OUTDIR

For each adapter OUTDIR/<base>-lora-<tag>/ holds adapter_config.json, adapter_model.safetensors,
ref_f32.safetensors (PEFT, float32, the base fixture's inputs.safetensors) and meta.json;
OUTDIR/<base>-lora-<tag>-merged/ holds the merged checkpoint (bf16) and its ref_f32.safetensors;
for the adapters in F32_MERGES, <...>-merged-f32/ also holds the merge saved in float32.
Adapter weights are random (B non-zero) and rounded to bf16 values, so the float32 references
use exactly the weights the files hold.
"""
import json
import os
import shutil
import sys

import torch
import transformers
import peft
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file

ADAPTERS = [
    # base fixture, tag, LoraConfig kwargs, save dtype, module-name prefix rewrite
    ("qwen3-tiny", "mixed", dict(r=8, lora_alpha=16, rank_pattern={"down_proj": 5, "k_proj": 13},
                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"]), torch.bfloat16),
    ("qwen3-odd-sharded", "rslora", dict(r=12, lora_alpha=20, use_rslora=True, alpha_pattern={"q_proj": 7},
                                         target_modules=r".*\.(q_proj|v_proj|down_proj)"), torch.bfloat16),
    ("qwen3_5-wrapper", "gdn", dict(r=16, lora_alpha=8, rank_pattern={"in_proj_a": 3, "in_proj_b": 2, "out_proj": 48},
                                    target_modules=["in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj",
                                                    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                    "down_proj"], layers_to_transform=[1, 2, 3]), torch.bfloat16),
    ("qwen3_5-text-odd", "subset", dict(r=4, lora_alpha=8, target_modules=["in_proj_qkv", "in_proj_z", "out_proj",
                                                                           "o_proj", "gate_proj", "down_proj"],
                                        layers_to_transform=[0, 2, 3], layers_pattern="layers"), torch.float32),
    ("qwen3-tiny", "alllinear", dict(r=3, lora_alpha=6, target_modules="all-linear",
                                     exclude_modules=["layers.1.mlp.up_proj"]), torch.bfloat16),
]


F32_MERGES = {"qwen3-tiny-lora-mixed", "qwen3_5-wrapper-lora-gdn"}


def load_base(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg["model_type"] == "qwen3_5":
        from transformers.models.qwen3_5 import Qwen3_5ForConditionalGeneration as cls
    else:
        cls = transformers.AutoModelForCausalLM
    return cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()


def logits(model, seqs):
    out = {}
    with torch.no_grad():
        for name, ids in seqs.items():
            out[name] = model(input_ids=ids.long().unsqueeze(0), use_cache=False).logits[0].float().contiguous()
    return out


def main():
    out_root = sys.argv[1]
    torch.manual_seed(0)
    for base_name, tag, kw, save_dtype in ADAPTERS:
        base_dir = os.path.join("fixtures", base_name)
        seqs = load_file(os.path.join(base_dir, "inputs.safetensors"))
        model = load_base(base_dir)
        pm = get_peft_model(model, LoraConfig(**kw))
        g = torch.Generator().manual_seed(sum(map(ord, tag)))
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_A" in n or "lora_B" in n:
                    std = 0.2 if "lora_A" in n else 0.1
                    p.copy_((torch.randn(p.shape, generator=g) * std).to(torch.bfloat16).float())
        pm.eval()
        ref = logits(pm, seqs)
        d = os.path.join(out_root, f"{base_name}-lora-{tag}")
        os.makedirs(d, exist_ok=True)
        pm.save_pretrained(d)
        if save_dtype != torch.float32:
            sd = load_file(os.path.join(d, "adapter_model.safetensors"))
            save_file({k: v.to(save_dtype) for k, v in sd.items()}, os.path.join(d, "adapter_model.safetensors"),
                      metadata={"format": "pt"})
        save_file(ref, os.path.join(d, "ref_f32.safetensors"))
        keys = sorted(load_file(os.path.join(d, "adapter_model.safetensors")).keys())
        meta = {"base": base_name, "peft": peft.__version__, "transformers": transformers.__version__,
                "num_tensors": len(keys), "first_keys": keys[:4]}
        json.dump(meta, open(os.path.join(d, "meta.json"), "w"), indent=2)
        if os.path.exists(os.path.join(d, "README.md")):
            os.remove(os.path.join(d, "README.md"))

        merged = pm.merge_and_unload()
        if base_name + "-lora-" + tag in F32_MERGES:
            # A float32 merge holds the delta exactly (no bf16 rounding residual): the fixture
            # on which extraction at the adapter's rank must reproduce the merged logits.
            fd = d + "-merged-f32"
            merged.save_pretrained(fd)
            save_file(logits(load_base(fd), seqs), os.path.join(fd, "ref_f32.safetensors"))
            shutil.copy(os.path.join(base_dir, "inputs.safetensors"), os.path.join(fd, "inputs.safetensors"))
            if os.path.exists(os.path.join(fd, "generation_config.json")):
                os.remove(os.path.join(fd, "generation_config.json"))
        merged = merged.to(torch.bfloat16)
        md = d + "-merged"
        merged.save_pretrained(md)
        for junk in ("generation_config.json",):
            if os.path.exists(os.path.join(md, junk)):
                os.remove(os.path.join(md, junk))
        mref = logits(load_base(md), seqs)
        save_file(mref, os.path.join(md, "ref_f32.safetensors"))
        shutil.copy(os.path.join(base_dir, "inputs.safetensors"), os.path.join(md, "inputs.safetensors"))
        top = sum(int((ref[k].argmax(-1) == mref[k].argmax(-1)).sum()) for k in ref)
        n = sum(ref[k].shape[0] for k in ref)
        base_ref = load_file(os.path.join(base_dir, "ref_f32.safetensors"))
        moved = sum(float((ref[k] - base_ref[k]).abs().max()) for k in ref)
        print(f"{d}: {len(keys)} tensors, e.g. {keys[:2]}; merged bf16 vs PEFT f32 top-1 {top}/{n}; "
              f"adapter moves logits by up to {moved:.2f}")


if __name__ == "__main__":
    main()
