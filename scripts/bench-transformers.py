#!/usr/bin/env python3
"""The comparison row of issue 9, re-measured beside graft bench on the same GPU: Hugging Face
transformers (SDPA attention) with random bf16 weights at a config's dimensions, then the same
model with a PEFT LoRA of rank R on every projection of the upper N layers.

    scripts/bench-transformers.py bench/configs/qwen3_5-27b --prefill 1024,4096 \
        --rank 256 --layers 24 --decode-tokens 32 --json OUT.json

Prints one line per measurement and writes them as JSON (the fields graft bench uses: kind,
adapter, tokens, seconds, tokens_per_s). Prefill = one forward pass of L random tokens from an
empty cache computing the last position's logits only (as graft's decision prefill), median of
--repeats after a warm-up. Decode = greedy generation of --decode-tokens tokens after a
64-token prompt at batch 1, tokens/s over the generated tokens. Runs on the GPU machine
(torch, transformers, peft); nothing here runs in CI.
"""
import argparse
import json
import statistics
import sys
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
               "out_proj", "gate_proj", "up_proj", "down_proj"]


def timed(fn, repeats):
    fn()  # warm-up
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(model, name, args, vocab, rows):
    gen = torch.Generator(device="cuda").manual_seed(1)
    for L in args.prefill:
        ids = torch.randint(0, vocab, (1, L), device="cuda", generator=gen)

        def prefill():
            with torch.no_grad():
                model(input_ids=ids, use_cache=False, logits_to_keep=1)

        s = timed(prefill, args.repeats)
        rows.append({"kind": "prefill", "adapter": name, "tokens": L, "seconds": s, "tokens_per_s": L / s})
        print(f"prefill {L:>6} {name or '-':<24} {s:.4f} s", flush=True)
    prompt = torch.randint(0, vocab, (1, 64), device="cuda", generator=gen)

    def decode():
        with torch.no_grad():
            model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.decode_tokens,
                           min_new_tokens=args.decode_tokens, do_sample=False, pad_token_id=0)

    s = timed(decode, 1)
    rows.append({"kind": "decode", "adapter": name, "tokens": 1, "seconds": s / args.decode_tokens,
                 "tokens_per_s": args.decode_tokens / s})
    print(f"decode batch 1 {name or '-':<24} {args.decode_tokens / s:.2f} tokens/s", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="directory with config.json (bench/configs/...)")
    p.add_argument("--prefill", default="1024,4096", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--rank", type=int, default=256, help="LoRA rank (0: base only)")
    p.add_argument("--layers", type=int, default=24, help="LoRA on every projection of this many upper layers")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench-transformers: no CUDA device")
    import transformers
    cfg = AutoConfig.from_pretrained(args.config)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{cfg.model_type}: {n_params / 1e9:.2f} B parameters, random bf16, built in {time.perf_counter() - t0:.0f} s; "
          f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}", flush=True)
    rows = []
    measure(model, "", args, cfg.vocab_size, rows)
    if args.rank > 0:
        import peft
        from peft import LoraConfig, get_peft_model
        layers = cfg.num_hidden_layers
        present = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        targets = [t for t in PROJECTIONS if t in present]
        lcfg = LoraConfig(r=args.rank, lora_alpha=args.rank, target_modules=targets,
                          layers_to_transform=list(range(max(0, layers - args.layers), layers)), layers_pattern="layers",
                          init_lora_weights=False)
        model = get_peft_model(model, lcfg)
        model.eval()
        lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
        name = f"peft-r{args.rank}-upper{args.layers}"
        print(f"PEFT {peft.__version__}: rank {args.rank} on {targets} of layers {layers - args.layers}..{layers - 1}, "
              f"{lora / 1e6:.1f} M parameters ({next(p for n, p in model.named_parameters() if 'lora_A' in n).dtype})",
              flush=True)
        measure(model, name, args, cfg.vocab_size, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"framework": "transformers+peft", "config": args.config, "gpu": torch.cuda.get_device_name(),
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
