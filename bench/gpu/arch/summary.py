"""The table of bench/gpu/arch/shapes.sh: for each model run (hf.py's results file), its weights, its
HBM floor at batch 1 (weight bytes / 3.35 TB/s), Chorus's tokens/s at batch 1 (and the share of the
floor) and 64, and transformers eager's beside them.
Usage: python3 bench/gpu/arch/summary.py <out-dir> <model-dtype>...
"""
import json
import os
import sys


def main():
    out_dir, names = sys.argv[1], sys.argv[2:]
    print(f"{'model':22} {'cache':6} {'weights GB':>10} {'floor tok/s':>11} {'b1 tok/s':>9} {'of floor':>8} {'b64 tok/s':>9} {'hf b1':>6} {'hf b64':>7} {'build s':>7}")
    for name in names:
        path = os.path.join(out_dir, f"{name}.json")
        if not os.path.exists(path):
            print(f"{name:22} no results (hf.py failed or ran out of time)")
            continue
        r = json.load(open(path))
        floor = r["hbm_floor_tokens_per_s_batch1"]
        caches = sorted({row["cache"] for row in r["rows"]})
        if not caches:
            print(f"{name:22} no Chorus rows (see the log)")
        for cache in caches:
            at = {row["batch"]: row for row in r["rows"] if row["cache"] == cache}
            one, many = at.get(1), at.get(64)
            cell = lambda row, key, width: f"{row[key]:{width}.0f}" if row is not None else f"{'-':>{width}}"
            share = f"{100 * one['of_hbm_floor']:7.0f}%" if one is not None else f"{'-':>8}"
            print(f"{name:22} {cache:6} {r['weights_gb']:10.2f} {floor:11.0f} {cell(one, 'tokens_per_s', 9)} {share} {cell(many, 'tokens_per_s', 9)} "
                  f"{cell(one, 'hf_tokens_per_s', 6)} {cell(many, 'hf_tokens_per_s', 7)} {r['build']['seconds']:7.0f}")


if __name__ == "__main__":
    main()
