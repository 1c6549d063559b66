"""Random, seeded fp16 checkpoints of TinyLlama-1.1B's and Llama-2-7B's shapes for the CUDA side-by-side
(bench/peer/cuda.sh), written by transformers in 1 GB shards with model.safetensors.index.json.
Usage: python3 bench/peer/make_checkpoints.py <dir> [tinyllama-1.1b,llama-2-7b]"""
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048),
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096),
}

out = sys.argv[1]
names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(SHAPES)
for name in names:
    target = os.path.join(out, name)
    if os.path.exists(os.path.join(target, "model.safetensors.index.json")):
        continue
    config = LlamaConfig(vocab_size=32000, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, **SHAPES[name])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.float16)
    model.save_pretrained(target, max_shard_size="1GB", safe_serialization=True)
    print(f"wrote {target}", flush=True)
