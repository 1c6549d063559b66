"""Random-weight checkpoints of Mistral-7B-v0.1's and Gemma-2-2B's shapes, written by transformers'
save_pretrained so that Chorus and transformers load the same files. Weights are drawn on the GPU
(normal, std 0.02, seeded) in the checkpoint's dtype; norms are the identity (Gemma's 1 + weight: 0).
Usage: python3 bench/gpu/window/make.py <shape> <out-dir> [--dtype float16|bfloat16]
Shapes: mistral-7b (sliding window 4096), gemma-2-2b (alternate windows of 4096, soft caps 50 and 30).
"""
import argparse
import json
import os

import torch
from transformers import AutoModelForCausalLM, Gemma2Config, MistralConfig

SHAPES = {
    "mistral-7b": lambda dtype: MistralConfig(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=4096,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, torch_dtype=dtype,
    ),
    "gemma-2-2b": lambda dtype: Gemma2Config(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0,
        query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0, tie_word_embeddings=True, torch_dtype=dtype,
    ),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("out")
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    args = parser.parse_args()
    if os.path.exists(os.path.join(args.out, "config.json")):
        print(f"{args.out}: present")
        return
    dtype = getattr(torch, args.dtype)
    config = SHAPES[args.shape](args.dtype)
    gemma = config.model_type == "gemma2"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(0.0 if gemma else 1.0)
            else:
                p.normal_(0.0, 0.02)
    model.save_pretrained(args.out, max_shard_size="1000GB", safe_serialization=True)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(json.dumps({"shape": args.shape, "out": args.out, "dtype": args.dtype, "bytes": size, "files": sorted(os.listdir(args.out))}))


if __name__ == "__main__":
    main()
