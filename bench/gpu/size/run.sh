#!/usr/bin/env bash
# Build time and peak memory of `chorus build` at real model sizes, on the GPU host:
#   source /root/gpu-env/env.sh && OUT=/tmp/size/out bash bench/gpu/size/run.sh
# Random checkpoints of the real shapes are made with transformers (save_pretrained, seeded), as one
# file and as 5 GB shards (model.safetensors.index.json), in the dtype the hub's checkpoints have;
# each is built as the native engine needs it (--flavor cuda --slot-decoder; fp16 also with the
# GreedySearch model, as `chorus serve` builds on GPUs) in each dtype asked for. Prints a table and
# writes $OUT/size.json. One checkpoint and one build are on disk at a time (at most ~33 GB, the 8B).
# Knobs: SIZE_MODELS (default "tinyllama llama2-7b llama3-8b"), SIZE_LAYOUTS ("single sharded"),
# SIZE_DTYPES ("fp16 bf16"), SIZE_DIR (/tmp/size).
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${SIZE_DIR:-/tmp/size}
OUT=${OUT:-$WORK/out}
MODELS=${SIZE_MODELS:-tinyllama llama2-7b llama3-8b}
LAYOUTS=${SIZE_LAYOUTS:-single sharded}
DTYPES=${SIZE_DTYPES:-fp16 bf16}
mkdir -p "$WORK" "$OUT"
RUNS="$OUT/size-runs.jsonl"
: > "$RUNS"

make_checkpoint() { # model layout dir
  python3 - "$1" "$2" "$3" <<'PY'
import inspect, json, sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
name, layout, out = sys.argv[1:4]
shapes = {
    'tinyllama': dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, dtype='bfloat16'),
    'llama2-7b': dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096, dtype='float16'),
    'llama3-8b': dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0, dtype='bfloat16'),
}
shape = dict(shapes[name])
dtype = getattr(torch, shape.pop('dtype'))
theta = shape.pop('rope_theta', 10000.0)
# transformers 5 keeps the rotary base in rope_parameters; 4.x in rope_theta.
if 'rope_parameters' in inspect.signature(LlamaConfig.__init__).parameters:
    shape['rope_parameters'] = {'rope_type': 'default', 'rope_theta': theta}
else:
    shape['rope_theta'] = theta
started = time.time()
config = LlamaConfig(**shape, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
with torch.device('cuda' if torch.cuda.is_available() else 'cpu'):
    model = LlamaForCausalLM(config).to(dtype)
model.save_pretrained(out, max_shard_size='200GB' if layout == 'single' else '5GB')
saved = json.load(open(f'{out}/config.json'))
rope = saved.get('rope_parameters') or {'rope_theta': saved.get('rope_theta')}
print(f'{name} {layout}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters in {dtype}, rope {rope}, made in {time.time() - started:.0f} s', flush=True)
PY
}

for model in $MODELS; do
  for layout in $LAYOUTS; do
    ckpt="$WORK/$model-$layout"
    rm -rf "$ckpt"
    make_checkpoint "$model" "$layout" "$ckpt"
    shards=$(ls "$ckpt"/*.safetensors | wc -l)
    for dtype in $DTYPES; do
      built="$WORK/$model-$layout-$dtype"
      rm -rf "$built"
      flags="--flavor cuda --slot-decoder"
      [ "$dtype" = fp16 ] && flags="$flags --greedy-search"
      # shellcheck disable=SC2086
      python3 - "$RUNS" "$model" "$layout" "$dtype" "$flags" "$ckpt" "$built" "$shards" -- node bin/chorus.js build "$ckpt" -o "$built" --dtype "$dtype" $flags <<'PY'
import json, os, resource, subprocess, sys, time
runs, model, layout, dtype, flags, ckpt, built, shards = sys.argv[1:9]
command = sys.argv[sys.argv.index('--') + 1:]
started = time.time()
result = subprocess.run(command)
wall = time.time() - started
if result.returncode != 0:
    sys.exit(f'chorus build failed ({result.returncode}): {" ".join(command)}')
size = lambda d: sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
stats = json.load(open(os.path.join(built, 'chorus_build.json')))['stats']
row = dict(model=model, layout=layout, shards=int(shards), checkpoint_bytes=size(ckpt), dtype=dtype, flags=flags,
           build_seconds=stats['seconds'], wall_seconds=round(wall, 2), peak_rss_bytes=stats['peakRssBytes'],
           child_max_rss_bytes=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
           weight_bytes=stats['weightBytes'], output_bytes=size(built))
open(runs, 'a').write(json.dumps(row) + '\n')
PY
      rm -rf "$built"
    done
    rm -rf "$ckpt"
  done
done

python3 - "$RUNS" "$OUT/size.json" <<'PY'
import json, platform, subprocess, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
gib = 1024 ** 3
print(f"{'model':<11} {'layout':<8} {'shards':>6} {'ckpt GB':>8} {'dtype':<5} {'build s':>8} {'peak RSS GiB':>12} {'child RSS GiB':>13} {'output GB':>9}")
for r in rows:
    print(f"{r['model']:<11} {r['layout']:<8} {r['shards']:>6} {r['checkpoint_bytes'] / 1e9:>8.1f} {r['dtype']:<5} {r['build_seconds']:>8.1f} {r['peak_rss_bytes'] / gib:>12.2f} {r['child_max_rss_bytes'] / gib:>13.2f} {r['output_bytes'] / 1e9:>9.1f}")
node = subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), platform.processor())
json.dump({'bench': 'chorus build at real sizes', 'command': 'bash bench/gpu/size/run.sh', 'node': node, 'cpu': cpu, 'runs': rows}, open(sys.argv[2], 'w'), indent=2)
print(f'wrote {sys.argv[2]}')
PY
