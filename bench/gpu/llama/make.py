"""Random-weight checkpoints of real model shapes, written by transformers' save_pretrained so that
Chorus and transformers load the same files. Weights are drawn on the GPU (normal, std 0.02, seeded)
in the checkpoint's dtype, so a 7B shape takes about a minute and no fp32 copy is ever made. Norm
weights are 1 (Gemma's, stored as an offset from 1, are 0).
Usage: python3 bench/gpu/llama/make.py <shape> <out-dir> [--dtype float16|bfloat16|float32] [--shard-gb N]
Shapes: tinyllama-1.1b, llama-2-7b, llama-2-13b, llama-3-8b, llama-small, and with the hub's configs llama-3.2-1b, qwen3-1.7b,
mistral-7b-v0.1, phi-3-mini-4k, gemma-2-2b.
"""
import argparse
import json
import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM

SHAPES = {
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, rope_theta=10000.0),
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096, rope_theta=10000.0),
    "llama-2-13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=40, vocab_size=32000, max_position_embeddings=4096, rope_theta=10000.0),
    # A small Llama (fp32 runs, such as tensor parallelism's exact-ids check).
    "llama-small": dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, rope_theta=10000.0),
    "llama-3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0),
}
LLAMA = dict(model_type="llama", rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)

# The hub's config.json of each model (architecture fields; the weights are random).
HUB = {
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False, mlp_bias=False,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192),
                         tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001),
    "qwen3-1.7b": dict(model_type="qwen3", hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0, rope_scaling=None, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False,
                       use_sliding_window=False, sliding_window=None, max_window_layers=28, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645),
    "mistral-7b-v0.1": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                            vocab_size=32000, max_position_embeddings=32768, rope_theta=10000.0, rms_norm_eps=1e-5, hidden_act="silu", sliding_window=4096,
                            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    "phi-3-mini-4k": dict(model_type="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                          vocab_size=32064, max_position_embeddings=4096, original_max_position_embeddings=4096, rope_theta=10000.0, rope_scaling=None,
                          rms_norm_eps=1e-5, hidden_act="silu", sliding_window=2047, attention_bias=False, embd_pdrop=0.0, resid_pdrop=0.0, attention_dropout=0.0,
                          tie_word_embeddings=False, bos_token_id=1, eos_token_id=32000, pad_token_id=32000),
    "gemma-2-2b": dict(model_type="gemma2", hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                       vocab_size=256000, max_position_embeddings=8192, rope_theta=10000.0, rms_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh",
                       hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=50.0, final_logit_softcapping=30.0, query_pre_attn_scalar=256,
                       sliding_window=4096, attention_bias=False, attention_dropout=0.0, tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0),
}


def config_of(shape, dtype):
    fields = dict(HUB[shape]) if shape in HUB else {**LLAMA, **SHAPES[shape]}
    model_type = fields.pop("model_type")
    return AutoConfig.for_model(model_type, **fields, torch_dtype=dtype)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=sorted([*SHAPES, *HUB]))
    parser.add_argument("out")
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--shard-gb", type=float, default=0, help="shard size in GB (0: one file)")
    args = parser.parse_args()
    if os.path.exists(os.path.join(args.out, "config.json")):
        print(f"{args.out}: present")
        return
    dtype = getattr(torch, args.dtype)
    config = config_of(args.shape, args.dtype)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(dtype)
    norm = 0.0 if config.model_type.startswith("gemma") else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(norm)
            else:
                p.normal_(0.0, 0.02)
    shard = f"{int(args.shard_gb * 1000)}MB" if args.shard_gb > 0 else "1000GB"
    model.save_pretrained(args.out, max_shard_size=shard, safe_serialization=True)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(json.dumps({"shape": args.shape, "out": args.out, "dtype": args.dtype, "bytes": size, "files": sorted(os.listdir(args.out))}))


if __name__ == "__main__":
    main()
