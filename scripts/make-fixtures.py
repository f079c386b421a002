#!/usr/bin/env python3
"""Make the small random Qwen3 / Qwen3.5 checkpoints under fixtures/ and their reference logits.

Runs where transformers (>= 5, with qwen3_5) and torch are installed (the GPU machine); the
forward passes run on the CPU in float32 with eager attention, so the reference is
deterministic. Usage: scripts/make-fixtures.py OUTDIR [NAME ...]   (NAMEs: only those fixtures)

For each fixture OUTDIR/<name>/ holds:
  config.json, model.safetensors (or shards + model.safetensors.index.json)  the checkpoint (bf16)
  inputs.safetensors     int32 1-D token sequences seq0..seqN (the `graft logits` input contract)
  ref_f32.safetensors    float32 [len, vocab] logits of transformers in float32 (weights = the bf16 values)
  ref_bf16.safetensors   bf16 [len, vocab] logits of transformers run in bfloat16 (eager, CPU)
  meta.json              versions, shapes and how far transformers' own bf16 run is from its float32 run
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file, load_file

SEQ_LENS = [1, 5, 17, 64, 130]  # 64 and 130 cross the GDN chunk size (64)


def qwen3_config(vocab, hidden, inter, layers, nh, nkv, hd, tied, rope=None):
    from transformers import Qwen3Config
    return Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                       num_hidden_layers=layers, num_attention_heads=nh, num_key_value_heads=nkv,
                       head_dim=hd, tie_word_embeddings=tied, max_position_embeddings=4096,
                       rms_norm_eps=1e-6, rope_parameters=rope or {"rope_type": "default", "rope_theta": 1e6},
                       bos_token_id=1, eos_token_id=2, pad_token_id=None)


def qwen3_5_text_config(vocab, hidden, inter, layer_types, nh, nkv, hd, hk, hv, dk, dv, tied):
    from transformers.models.qwen3_5 import Qwen3_5TextConfig
    rot = int(hd * 0.25)
    half = rot // 2
    sec = [half - 2 * (half // 3), half // 3, half // 3]
    return Qwen3_5TextConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                             num_hidden_layers=len(layer_types), layer_types=layer_types,
                             num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd,
                             linear_num_key_heads=hk, linear_num_value_heads=hv,
                             linear_key_head_dim=dk, linear_value_head_dim=dv,
                             linear_conv_kernel_dim=4, tie_word_embeddings=tied,
                             max_position_embeddings=4096, rms_norm_eps=1e-6,
                             rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                              "partial_rotary_factor": 0.25,
                                              "mrope_section": sec, "mrope_interleaved": True},
                             bos_token_id=1, eos_token_id=2, pad_token_id=None)


def randomise(model, gen, arch, emb_std, w_std, head_boost):
    """Fill every parameter with seeded random values, then round them to bf16.

    Norm weights get visible noise so the (1+w) and plain-w conventions are both exercised.
    An untied lm_head gets a permuted copy of the embedding mixed in (head_boost) so that the
    next-token distribution has a clear top choice, as a trained model's does; without it the
    logits of a random model are nearly flat and bf16 rounding alone flips the argmax.
    """
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, p in params.items():
            if name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * emb_std)
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.rand(p.shape, generator=gen) * 15 + 1))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif "conv1d" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
            elif "norm" in name and p.dim() == 1:
                one_plus = arch == "qwen3_5" and not name.endswith("linear_attn.norm.weight")
                base = 0.0 if one_plus else 1.0
                p.copy_(base + torch.randn(p.shape, generator=gen) * 0.15)
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * w_std)
            else:
                raise RuntimeError(f"unhandled parameter {name} {tuple(p.shape)}")
        if "lm_head.weight" in params and not model.config.get_text_config().tie_word_embeddings:
            emb = [v for k, v in params.items() if k.endswith("embed_tokens.weight")][0]
            perm = torch.randperm(emb.shape[0], generator=gen)
            params["lm_head.weight"].add_(emb[perm] * head_boost)
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def run_logits(model, seqs, dtype):
    m = model.to(dtype)
    out = {}
    with torch.no_grad():
        for name, ids in seqs.items():
            o = m(input_ids=ids.long().unsqueeze(0), use_cache=False)
            out[name] = o.logits[0].to(dtype).contiguous()
    model.to(torch.float32)
    return out


def run_decode(model, ids):
    """Token-by-token with the cache (HF's recurrent GDN path), float32."""
    out = []
    with torch.no_grad():
        past = None
        for t in range(ids.numel()):
            o = model(input_ids=ids[t:t + 1].long().view(1, 1), past_key_values=past, use_cache=True)
            past = o.past_key_values
            out.append(o.logits[0, -1])
    return torch.stack(out)


def stats(ref, other):
    top_same, total, max_rel = 0, 0, 0.0
    for k in ref:
        a, b = ref[k].float(), other[k].float()
        top_same += int((a.argmax(-1) == b.argmax(-1)).sum())
        total += a.shape[0]
        max_rel = max(max_rel, float((a - b).abs().max() / a.abs().max()))
    return {"top1_agreement": top_same / total, "max_abs_diff_over_max_abs": max_rel}


ONLY = set()


def make(out_dir, name, model_cls, config, arch, seed, emb_std, w_std, head_boost, shard, wrapper=False):
    if ONLY and name not in ONLY:
        return
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32).eval()
    model.config._attn_implementation = "eager"
    randomise(model, gen, arch, emb_std, w_std, head_boost)
    vocab = config.vocab_size
    seqs = {f"seq{i}": torch.randint(0, vocab, (n,), generator=gen, dtype=torch.int32)
            for i, n in enumerate(SEQ_LENS)}
    ref32 = run_logits(model, seqs, torch.float32)
    ref16 = run_logits(model, seqs, torch.bfloat16)
    meta = {"name": name, "arch": arch, "wrapper": wrapper, "seed": seed,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "seq_lens": SEQ_LENS, "hf_bf16_vs_f32": stats(ref32, ref16)}
    try:
        dec = run_decode(model, seqs["seq4"])
        meta["hf_decode_vs_prefill_f32"] = stats({"s": ref32["seq4"]}, {"s": dec})
    except Exception as e:  # recorded, not fatal: the decode check is informative only
        meta["hf_decode_error"] = repr(e)

    model16 = model.to(torch.bfloat16)
    if wrapper:
        write_wrapper(d, model16, config)
        meta["wrapper_reload"] = check_wrapper_reload(d, seqs, ref32)
    else:
        model16.save_pretrained(d, max_shard_size=shard) if shard else model16.save_pretrained(d)
    save_file(seqs, os.path.join(d, "inputs.safetensors"))
    save_file(ref32, os.path.join(d, "ref_f32.safetensors"))
    save_file(ref16, os.path.join(d, "ref_bf16.safetensors"))
    for junk in ("generation_config.json",):
        p = os.path.join(d, junk)
        if os.path.exists(p):
            os.remove(p)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(name, json.dumps(meta))


def write_wrapper(d, model16, text_config):
    """The official Qwen3.5 layout: text weights under model.language_model., plus a vision tower
    and an MTP layer that a text-only loader must skip."""
    sd = {}
    for k, v in model16.state_dict().items():
        if k.startswith("model."):
            sd["model.language_model." + k[len("model."):]] = v.contiguous()
        elif k == "lm_head.weight" and not text_config.tie_word_embeddings:
            sd[k] = v.contiguous()
    g = torch.Generator().manual_seed(7)
    H = text_config.hidden_size
    sd["model.visual.patch_embed.proj.weight"] = torch.randn(32, 3, 2, 4, 4, generator=g).to(torch.bfloat16)
    sd["model.visual.blocks.0.attn.qkv.weight"] = torch.randn(96, 32, generator=g).to(torch.bfloat16)
    sd["model.visual.merger.linear_fc2.weight"] = torch.randn(H, 128, generator=g).to(torch.bfloat16)
    sd["mtp.fc.weight"] = torch.randn(H, 2 * H, generator=g).to(torch.bfloat16)
    sd["mtp.layers.0.input_layernorm.weight"] = torch.randn(H, generator=g).to(torch.bfloat16)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    tc = text_config.to_dict()
    tc["model_type"] = "qwen3_5_text"
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "text_config": tc,
           "vision_config": {"model_type": "qwen3_5", "depth": 1, "hidden_size": 32, "num_heads": 2,
                             "intermediate_size": 64, "out_hidden_size": H, "patch_size": 4,
                             "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3},
           "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
           "vision_end_token_id": 248054, "tie_word_embeddings": text_config.tie_word_embeddings,
           "dtype": "bfloat16", "transformers_version": transformers.__version__}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def check_wrapper_reload(d, seqs, ref32):
    """Load the wrapper checkpoint with transformers' own multimodal class and compare logits."""
    try:
        from transformers.models.qwen3_5 import Qwen3_5ForConditionalGeneration
        m = Qwen3_5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
        got = run_logits(m, seqs, torch.float32)
        return stats(ref32, got)
    except Exception as e:
        return {"error": repr(e)[:500]}


def main():
    out = sys.argv[1]
    ONLY.update(sys.argv[2:])  # optional: names of the fixtures to make
    from transformers import Qwen3ForCausalLM
    from transformers.models.qwen3_5 import Qwen3_5ForCausalLM
    L, F = "linear_attention", "full_attention"
    make(out, "qwen3-tiny", Qwen3ForCausalLM,
         qwen3_config(vocab=512, hidden=64, inter=160, layers=2, nh=4, nkv=2, hd=16, tied=True),
         "qwen3", seed=11, emb_std=0.5, w_std=0.08, head_boost=0.0, shard=None)
    make(out, "qwen3-odd-sharded", Qwen3ForCausalLM,
         qwen3_config(vocab=389, hidden=80, inter=200, layers=3, nh=6, nkv=1, hd=24, tied=False),
         "qwen3", seed=12, emb_std=0.5, w_std=0.08, head_boost=3.0, shard="60KB")
    make(out, "qwen3_5-wrapper", Qwen3_5ForCausalLM,
         qwen3_5_text_config(vocab=512, hidden=64, inter=128, layer_types=[L, F, L, F], nh=4, nkv=2,
                             hd=32, hk=2, hv=4, dk=16, dv=16, tied=False),
         "qwen3_5", seed=13, emb_std=0.5, w_std=0.08, head_boost=3.0, shard=None, wrapper=True)
    make(out, "qwen3_5-text-odd", Qwen3_5ForCausalLM,
         qwen3_5_text_config(vocab=300, hidden=72, inter=136, layer_types=[L, L, F, L, L], nh=3, nkv=1,
                             hd=64, hk=3, hv=6, dk=8, dv=12, tied=True),
         "qwen3_5", seed=14, emb_std=0.5, w_std=0.08, head_boost=0.0, shard="40KB")
    # YaRN (Qwen3's long-context setting): factor derived from 4096 / 1024.
    make(out, "qwen3-yarn", Qwen3ForCausalLM,
         qwen3_config(vocab=512, hidden=64, inter=160, layers=2, nh=4, nkv=2, hd=32, tied=True,
                      rope={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                            "original_max_position_embeddings": 1024}),
         "qwen3", seed=15, emb_std=0.5, w_std=0.08, head_boost=0.0, shard=None)


if __name__ == "__main__":
    main()
