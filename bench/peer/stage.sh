#!/usr/bin/env bash
# Packs bench/peer/node_modules (node-llama-cpp and its llama.cpp sources; not its prebuilt binaries,
# which the GPU host cannot use) into parts of at most 40 MB under .device/peer-pK/, for a GPU host that
# has no npm registry. Run here, after ../shared/gpu/stage:  bash bench/peer/stage.sh
# On the host, one command per part, each carrying its folder:  bash .device/peer-pK/recv.sh
# The last one unpacks into /root/peer-modules, where bench/peer/cuda.sh finds it.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
[ -d bench/peer/node_modules/node-llama-cpp ] || (cd bench/peer && npm ci --no-audit --no-fund)
work=$(mktemp -d)
tar cf - --exclude='node_modules/@node-llama-cpp' -C bench/peer node_modules | zstd -q -T0 -12 | split -b "${PART_MB:-40}M" -d -a 2 - "$work/part"
rm -rf .device/peer-p*
n=$(ls "$work"/part* | wc -l)
i=0
for p in "$work"/part*; do
  d=.device/peer-p$i; mkdir -p "$d"; mv "$p" "$d/"; cp "$(command -v zstd)" "$d/zstd"; echo "$n" > "$d/count"
  cat > "$d/recv.sh" <<'RECV'
#!/usr/bin/env bash
set -e
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /root/peer-stage && cp "$here"/part* /root/peer-stage/
have=$(ls /root/peer-stage/part* | wc -l)
if [ "$have" -ge "$(cat "$here/count")" ]; then
  rm -rf /root/peer-modules && mkdir -p /root/peer-modules
  cat /root/peer-stage/part* | "$here/zstd" -d | tar xf - -C /root/peer-modules
  echo "peer modules ready in /root/peer-modules"
else
  echo "received $have of $(cat "$here/count") parts"
fi
RECV
  chmod +x "$d/recv.sh"; i=$((i+1))
done
rm -rf "$work"
echo "staged $n parts: $(ls -d .device/peer-p* | tr '\n' ' ')"
