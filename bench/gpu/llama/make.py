"""Random-weight checkpoints of real Llama shapes, written by transformers' save_pretrained so that
Chorus and transformers load the same files. Weights are drawn on the GPU (normal, std 0.02, seeded)
in the checkpoint's dtype, so a 7B shape takes about a minute and no fp32 copy is ever made.
Usage: python3 bench/gpu/llama/make.py <shape> <out-dir> [--dtype float16|bfloat16] [--shard-gb N]
Shapes: tinyllama-1.1b, llama-2-7b, llama-3-8b.
"""
import argparse
import json
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, rope_theta=10000.0),
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096, rope_theta=10000.0),
    "llama-3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("out")
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--shard-gb", type=float, default=0, help="shard size in GB (0: one file)")
    args = parser.parse_args()
    if os.path.exists(os.path.join(args.out, "config.json")):
        print(f"{args.out}: present")
        return
    dtype = getattr(torch, args.dtype)
    config = LlamaConfig(**SHAPES[args.shape], rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, torch_dtype=args.dtype)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    shard = f"{int(args.shard_gb * 1000)}MB" if args.shard_gb > 0 else "1000GB"
    model.save_pretrained(args.out, max_shard_size=shard, safe_serialization=True)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(json.dumps({"shape": args.shape, "out": args.out, "dtype": args.dtype, "bytes": size, "files": sorted(os.listdir(args.out))}))


if __name__ == "__main__":
    main()
