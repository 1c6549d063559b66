"""Transformers' side of the real-size comparison, and the table: the checkpoint speed.ts ran, eager
attention in the same dtype, greedy generate with 128 new tokens (min_new_tokens = max_new_tokens) on
speed.ts's prompts, at each batch speed.ts ran; then Chorus's rows beside transformers'.
Usage: python3 bench/gpu/llama/hf.py <work-dir>/<name>-<dtype>.json <out-dir>
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "speed"))
from hf_common import seeded_rows, timed, write_results  # noqa: E402


def main():
    chorus_file, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    chorus = json.load(open(chorus_file))
    dtype = torch.bfloat16 if chorus["dtype"] == "bf16" else torch.float16
    model = AutoModelForCausalLM.from_pretrained(chorus["checkpoint"], dtype=dtype, attn_implementation="eager").cuda().eval()
    weights_gb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e9
    # The HBM floor at batch 1: every weight read once a step at the H100's 3.35 TB/s.
    floor = 3.35e12 / (weights_gb * 1e9)
    rows = []
    refs = {}
    for row in chorus["rows"]:
        if "error" in row:
            print(f"{row['cache']}: {row['error']}")
            continue
        batch, new = row["batch"], chorus["new_tokens"]
        ids = torch.tensor(seeded_rows(batch, chorus["prompt"], 32000), device="cuda")
        if batch not in refs:
            refs[batch] = timed(lambda: model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0), batch, new)
        ref = refs[batch]
        with torch.no_grad():
            first = model.generate(input_ids=ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=16, do_sample=False, pad_token_id=0)[0, chorus["prompt"]:].tolist()
        same = sum(1 for a, b in zip(first, row["ids_first_row"]) if a == b)
        of_floor = row["tokens_per_s"] / floor if batch == 1 else None
        rows.append({**row, "hf_tokens_per_s": ref["tokens_per_s"], "hf_ms_per_step": ref["ms_per_step"], "ratio_tokens_per_s": row["tokens_per_s"] / ref["tokens_per_s"], "hf_first_row_same_of_16": same, "of_hbm_floor": of_floor})
        torch.cuda.empty_cache()
    name = f"{chorus['name']}-{chorus['dtype']}"
    write_results(os.path.join(out_dir, f"{name}.json"), rows, model=chorus["name"], dtype=chorus["dtype"], prompt=chorus["prompt"], new_tokens=chorus["new_tokens"], build=chorus["build"], weights_gb=weights_gb, hbm_floor_tokens_per_s_batch1=floor)
    for line in chorus.get("load", []):
        print(line)
    print(f"{name}: weights {weights_gb:.2f} GB, HBM floor at batch 1 {floor:.0f} tok/s; build {chorus['build']['seconds']:.0f} s, peak RSS {chorus['build']['peak_rss_mib']:.0f} MiB")
    print(f"{'setting':16} {'chorus tok/s':>12} {'of floor':>8} {'hf tok/s':>9} {'ratio':>6} {'ms/step':>8} {'hf ms/step':>10} {'ttft ms':>8} {'GPU MiB':>8} {'same/16':>7}")
    for r in rows:
        of_floor = f"{100 * r['of_hbm_floor']:7.0f}%" if r["of_hbm_floor"] is not None else f"{'':>8}"
        print(f"{r['setting']:16} {r['tokens_per_s']:12.0f} {of_floor} {r['hf_tokens_per_s']:9.0f} {r['ratio_tokens_per_s']:6.2f} {r['ms_per_step']:8.2f} {r['hf_ms_per_step']:10.2f} {r['ttft_ms_median']:8.1f} {r['gpu_memory_mib']:8d} {r['hf_first_row_same_of_16']:7d}")


if __name__ == "__main__":
    main()
