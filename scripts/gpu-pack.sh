#!/usr/bin/env bash
# Prepares the folder `make gpu-check` sends to a GPU host (docs/gpu.md): everything the check
# needs, under the 64 MiB a transfer may carry (the folder plus the working tree that travels
# with it).
#   usage: scripts/gpu-pack.sh DEST MODEL_DIR PYTHON ORT_PACK_CACHE
#     MODEL_DIR       the built minilm folder ($CACHE/models/<key>/minilm)
#     PYTHON          the model venv's python (numpy + onnx), for gpucheck.py strip
#     ORT_PACK_CACHE  where the packed ORT CUDA libraries are kept between runs
#   env: GO, VERSION and CGO_LDFLAGS as the Makefile sets them; ORT_CUDA_PACK: the packing
#        script (default: ../shared/gpu/pack-ort-cuda.sh beside the repository)
#
# DEST/
#   gpu-check.sh, gpucheck.py   the check and its Python helpers (run there: bash gpu-check.sh)
#   server.xz, server.sha256    bin/server built here for x86-64 (cgo, glibc 2.34+), stripped
#   ort/                        ONNX Runtime 1.29.0 + its CUDA provider, sm_90 only, xz'd, and
#                               unpack.sh (from pack-ort-cuda.sh, ~48 MiB)
#   models.tar.xz               the built fp32/fp16/int8 MiniLM graphs with their large tensors
#                               emptied, tokenizer.json, model.yaml: gpu-check.sh fills the
#                               tensors with seeded random weights there (gpucheck.py)
#   MANIFEST                    what was built, from what, when, and the sizes
# The real weights do not fit: the libraries and the server take ~56 MiB of the 64, and the
# smallest version (int8) is 22 MB.
set -euo pipefail
ME=gpu-pack
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

DEST=${1:?usage: gpu-pack.sh DEST MODEL_DIR PYTHON ORT_PACK_CACHE}
MODEL=${2:?usage: gpu-pack.sh DEST MODEL_DIR PYTHON ORT_PACK_CACHE}
PY=${3:?usage: gpu-pack.sh DEST MODEL_DIR PYTHON ORT_PACK_CACHE}
PACK=${4:?usage: gpu-pack.sh DEST MODEL_DIR PYTHON ORT_PACK_CACHE}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
VERSION=${VERSION:-dev}
PACKER=${ORT_CUDA_PACK:-$ROOT/../shared/gpu/pack-ort-cuda.sh}
LIMIT=$((64 << 20)) # bytes a transfer carries: this folder and the working tree together
for f in fp32.onnx fp16.onnx int8.onnx model.yaml tokenizer.json; do
  [ -f "$MODEL/$f" ] || die "$MODEL/$f missing: run make models"
done
[ -x "$PY" ] || die "$PY missing: run make venv"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
T0=$SECONDS

# ORT with the CUDA provider, packed once per version of the packing scripts (it fetches
# ~230 MB from npm and xz's for ~2 minutes).
[ -f "$PACKER" ] || die "no $PACKER: set ORT_CUDA_PACK to pack-ort-cuda.sh (its folder has unpack.sh and fatbin_trim.py)"
KEY=$(cat "$PACKER" "$(dirname "$PACKER")/unpack.sh" "$(dirname "$PACKER")/fatbin_trim.py" | sha256sum | cut -c1-12)
if [ "$(cat "$PACK/.stamp" 2>/dev/null)" != "$KEY" ]; then
  log "packing ONNX Runtime's CUDA provider into $PACK (npm, trim to sm_90, xz: minutes)"
  rm -rf "$PACK.partial"
  bash "$PACKER" "$PACK.partial" >&2
  echo "$KEY" > "$PACK.partial/.stamp"
  rm -rf "$PACK" && mv "$PACK.partial" "$PACK"
else
  log "ORT CUDA pack: $PACK (cached, scripts $KEY)"
fi

rm -rf "$DEST"
mkdir -p "$DEST/ort"
cp "$PACK"/{libonnxruntime.so.1.xz,libonnxruntime_providers_cuda.so.xz,libonnxruntime_providers_shared.so,SHA256SUMS,unpack.sh} "$DEST/ort/"

# The server, stripped (-s -w: 28 MB instead of 38) and xz'd (~8 MB); the host has no Go.
log "building the server (stripped) and compressing it"
(cd "$ROOT" && "$GO" build -tags ort -trimpath -ldflags "-s -w -X main.version=$VERSION" -o "$W/server" ./cmd/server)
(cd "$W" && sha256sum server) > "$DEST/server.sha256"
xz -9 -T2 -c "$W/server" > "$DEST/server.xz"
GLIBC=$(objdump -T "$W/server" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 || true)

log "emptying the large tensors of $MODEL's graphs"
"$PY" "$ROOT/scripts/gpu/gpucheck.py" strip --src "$MODEL" --out "$W/skel" >&2
tar -C "$W/skel" -cf - . | xz -9 -T2 > "$DEST/models.tar.xz"

cp "$ROOT/scripts/gpu-check.sh" "$ROOT/scripts/gpu/gpucheck.py" "$DEST/"

folder=$(du -sb "$DEST" | cut -f1)
tree=$(cd "$ROOT" && git ls-files -z -co --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$((folder + tree))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
{
  echo "gpu-check folder, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) by scripts/gpu-pack.sh"
  echo "ortserve $VERSION ($(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')), $("$GO" version | cut -d' ' -f3-), needs ${GLIBC:-?}"
  echo "ORT pack $PACK (scripts $KEY); models from $(readlink -f "$MODEL")"
  echo "models: the built graphs, random weights filled in there: throughput and placement only"
  echo "size: folder $(mib "$folder") + working tree $(mib "$tree") = $(mib "$total") of 64 MiB"
  (cd "$DEST" && find . -type f ! -name MANIFEST -printf '%s %p\n' | sort -k2 | awk '{printf "  %10d  %s\n", $1, $2}')
} > "$DEST/MANIFEST"
cat "$DEST/MANIFEST" >&2
[ "$total" -le "$LIMIT" ] || die "$(mib "$total") is over the 64 MiB a transfer carries"
log "ready in $((SECONDS - T0)) s: carry $DEST, run bash $DEST/gpu-check.sh (docs/gpu.md)"
