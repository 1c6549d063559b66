"""The tensor-parallel benchmark's table and its one results file, from what run.sh's phases wrote.
Usage: python3 bench/gpu/tp/report.py <results-dir> <checkpoint>   (REPORT_GPUS="<name>, <memory>;..." where
nvidia-smi is not there)
Writes <results-dir>/tp-llama-2-13b.json and bench/results/tp-llama-2-13b-<date>-<gpu>.json.
"""
import datetime
import json
import os
import re
import subprocess
import sys


def load(results, name):
    path = os.path.join(results, name)
    return json.load(open(path)) if os.path.exists(path) else None


def ids_agreement(a, b):
    """Position by position over each row (rows as long as the shorter), and the first position that differs."""
    if not a or not b or "ids" not in a or "ids" not in b:
        return None
    rows = []
    for x, y in zip(a["ids"], b["ids"]):
        n = min(len(x), len(y))
        same = sum(1 for i in range(n) if x[i] == y[i])
        first = next((i for i in range(n) if x[i] != y[i]), None)
        rows.append({"tokens": n, "equal": same, "percent_equal": 100 * same / max(1, n), "first_difference": first})
    total = sum(r["tokens"] for r in rows)
    return {"first_row_percent_equal": rows[0]["percent_equal"], "all_rows_percent_equal": 100 * sum(r["equal"] for r in rows) / max(1, total), "rows": rows}


def counted(run):
    """speed.ts's step-by-step count against the reference run (TP_REFERENCE), when it made one."""
    return (run or {}).get("agreement")


def rate(run, batch):
    for row in (run or {}).get("rows", []):
        if row["batch"] == batch:
            return row["tokens_per_s"]
    return None


def build_stats(results, tp):
    text = open(os.path.join(results, f"tp-build-tp{tp}.log")).read() if os.path.exists(os.path.join(results, f"tp-build-tp{tp}.log")) else ""
    found = re.search(r"([\d.]+ [KMGT]?B) of weights in ([\d.]+) s, peak RSS ([\d.]+ [KMGT]?B)", text)
    return {"weights": found.group(1), "seconds": float(found.group(2)), "peak_rss": found.group(3)} if found else None


def fmt(value, spec=".0f"):
    return "-" if value is None else format(value, spec)


def main():
    results, checkpoint = sys.argv[1], sys.argv[2]
    tp1, tp2, hf = load(results, "tp1.json"), load(results, "tp2.json"), load(results, "hf.json")
    tp2_slots = load(results, "tp2-slots.json")
    memory1, memory2 = load(results, "memory-tp1.json"), load(results, "memory-tp2.json")
    served = load(results, "served-tp2.json")
    try:
        gpus = subprocess.check_output(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"], text=True).strip().split("\n")
    except (OSError, subprocess.CalledProcessError):
        # Reporting elsewhere than on the GPU host: its GPUs as nvidia-smi named them there, one per ';'.
        gpus = os.environ["REPORT_GPUS"].split(";") if os.environ.get("REPORT_GPUS") else ["no GPU"]
    phases = [line.split("\t") for line in open(os.path.join(results, "tp-phases.tsv")).read().strip().split("\n")[1:]]
    speed = []
    for batch, target in [(1, 1.6), (64, 1.5)]:
        one, two, slots, auto = rate(tp1, batch), rate(tp2, batch), rate(tp2_slots, batch), rate(hf, batch)
        speed.append({"batch": batch, "tp1_tokens_per_s": one, "tp2_tokens_per_s": two, "tp2_over_tp1": two / one if one and two else None,
                      "tp2_slots_tokens_per_s": slots, "tp2_slots_over_tp1": slots / one if one and slots else None,
                      "target": target, "transformers_device_map_auto_tokens_per_s": auto})
    served_rate = served["settings"][0]["summary"]["outputTokensPerS"] if served else None
    report = {
        "date": datetime.date.today().isoformat(),
        "gpus": gpus,
        "checkpoint": {"shape": "llama-2-13b", "path": checkpoint, "config": json.load(open(os.path.join(checkpoint, "config.json")))},
        "workload": "greedy, prompts of 128 seeded ids, 128 new tokens (min_length too); batch N = N requests submitted together; ids: 4 rows of 512 new tokens",
        "builds": {"tp1": build_stats(results, 1), "tp2": build_stats(results, 2)},
        "speed": speed,
        "ids_fp16_tp2_vs_tp1": ids_agreement(tp1, tp2),
        "ids_fp32_small_tp2_vs_tp1": ids_agreement(load(results, "small-tp1.json"), load(results, "small-tp2.json")),
        "ids_counted": {
            "how": "TP=2 decoding from TP=1's prefix: a step whose id differs counts as unequal and the row goes on from TP=1's prefix through it",
            "fp16_13b_paged": counted(tp2),
            "fp16_13b_slots": counted(tp2_slots),
            "fp32_llama_small": counted(load(results, "small-tp2.json")),
            "fp32_stories260k": counted(load(results, "stories-tp2.json")),
        },
        "memory_check": {
            "gpu_memory_utilization": next((line.split(": ")[1] for line in (memory1 or memory2 or {}).get("definition", []) if line.startswith("gpu_memory_utilization")), None),
            "tp1": {k: (memory1 or {}).get(k) for k in ["refused", "served", "load", "gpu_memory_mib_loaded"]},
            "tp2": {k: (memory2 or {}).get(k) for k in ["refused", "served", "load", "gpu_memory_mib_loaded"]},
        },
        "served_tp2_64_streams_tokens_per_s": served_rate,
        "load": {"tp1": (tp1 or {}).get("load"), "tp2": (tp2 or {}).get("load"), "tp1_seconds": (tp1 or {}).get("load_seconds"), "tp2_seconds": (tp2 or {}).get("load_seconds")},
        "transformers": {k: (hf or {}).get(k) for k in ["torch", "transformers", "attention", "devices", "load_seconds", "max_memory_allocated_mib"]},
        "phases_seconds": {p[0]: float(p[1]) for p in phases if len(p) == 3},
        "runs": {"tp1": tp1, "tp2": tp2, "tp2_slots": tp2_slots, "hf": hf},
    }
    out = os.path.join(results, "tp-llama-2-13b.json")
    json.dump(report, open(out, "w"), indent=2)
    gpu = re.sub(r"[^a-z0-9]+", "", (gpus[0].split(",")[0].lower().replace("nvidia", "").split() or ["gpu"])[0])
    dated = os.path.join("bench", "results", f"tp-llama-2-13b-{report['date']}-{gpu}x{len(gpus)}.json")
    json.dump({k: v for k, v in report.items() if k != "runs"}, open(dated, "w"), indent=2)

    print(f"\nLlama-2-13B shape, fp16, {len(gpus)} x {gpus[0]}")
    print(f"{'setting':10} {'TP=1 tok/s':>10} {'TP=2 tok/s':>10} {'TP2/TP1':>8} {'TP=2 slots':>10} {'/TP1':>5} {'target':>7} {'hf auto tok/s':>13}")
    for s in speed:
        print(f"batch {s['batch']:<4} {fmt(s['tp1_tokens_per_s']):>10} {fmt(s['tp2_tokens_per_s']):>10} {fmt(s['tp2_over_tp1'], '.2f'):>8} {fmt(s['tp2_slots_tokens_per_s']):>10} {fmt(s['tp2_slots_over_tp1'], '.2f'):>5} {s['target']:>6}x {fmt(s['transformers_device_map_auto_tokens_per_s']):>13}")
    for label, key, target in [("fp16, 13B", "ids_fp16_tp2_vs_tp1", 95), ("fp32, small", "ids_fp32_small_tp2_vs_tp1", 100)]:
        a = report[key]
        if a is None:
            print(f"greedy ids TP=2 vs TP=1 ({label}): not measured")
        else:
            firsts = [r["first_difference"] for r in a["rows"]]
            print(f"greedy ids TP=2 vs TP=1 ({label}): {a['first_row_percent_equal']:.1f}% of the first row's {a['rows'][0]['tokens']} (target >= {target}%), {a['all_rows_percent_equal']:.1f}% of all rows; first differences {firsts}")
    for label, c in report["ids_counted"].items():
        if isinstance(c, dict):
            print(f"ids counted from TP=1's prefix ({label}): {c['percent_equal']:.2f}% of {c['tokens']}; steps that differed {[r['differed'] for r in c['rows']]}")
            gaps = [m["gap"] for r in c["rows"] for m in r.get("margins", [])]
            if gaps:
                print(f"  TP=2's gap between its two best log-probabilities at those steps: largest {max(gaps):.2e}, median {sorted(gaps)[len(gaps) // 2]:.2e}")
    m = report["memory_check"]
    for tp in ["tp1", "tp2"]:
        verdict = f"refused: {m[tp]['refused']}" if m[tp]["refused"] else ("served" if m[tp]["served"] else "not measured")
        print(f"memory check {tp.upper()}: {verdict}")
        for line in m[tp]["load"] or []:
            print(f"  {line}")
    if served_rate is not None:
        print(f"served (chorus serve + chorus bench, TP=2, 64 streams, sampled): {served_rate:.0f} tok/s")
    for tp in ["tp1", "tp2"]:
        b = report["builds"][tp]
        if b:
            print(f"build {tp.upper()}: {b['weights']} in {b['seconds']:.0f} s, peak RSS {b['peak_rss']}")
    print("phases: " + ", ".join(f"{k} {v:.0f} s" for k, v in report["phases_seconds"].items()))
    print(f"wrote {out} and {dated}")


if __name__ == "__main__":
    main()
