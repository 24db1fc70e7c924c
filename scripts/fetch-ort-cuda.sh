#!/usr/bin/env bash
# Makes DIR a CUDA-capable ONNX Runtime 1.29.0 folder (linux x86-64, CUDA 13 + cuDNN 9):
#   the core library from fetch-ort.sh (same pins), plus the provider libraries
#   libonnxruntime_providers_{shared,cuda,tensorrt}.so, which ORT loads from its own folder.
# Source: the npm package com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 (providers built for
# ORT 1.29.0; package/Plugins/Linux/x64/). All hashes are pinned below. Used by Dockerfile.cuda;
# the same sources as /work/shared/gpu/pack-ort-cuda.sh, without its sm_90-only trim and xz.
# The CUDA provider needs libcudart/libcublas/libcublasLt .so.13, libcurand.so.10, libcuda.so.1,
# and lazily libcudnn.so.9, libcufft.so.12, libnvrtc.so.13. TensorRT's needs libnvinfer (absent
# from the CUDA images; only loaded if asked for).
#   usage: scripts/fetch-ort-cuda.sh DIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib/npm.sh"

PKG=com.github.asus4.onnxruntime.linux-x64-gpu
VER=0.4.9
TGZ_SHA256=2b459e0c17f340c92970c10ed86de4f37a3009f93c14053e6ad4334cbb6be412
LIBS=(   # name sha256
  libonnxruntime_providers_shared.so c6a12593396095f5670160e284c35d1700b7708cf3037b7042e2a5200ccae772
  libonnxruntime_providers_cuda.so 56cf3254b118ad837ccc4ed8f6d1b23504bbf7ef91b34cbc0b289cb7f10b3037
  libonnxruntime_providers_tensorrt.so ef6071798a339038ad66c428fb1a809cf8e499bffc3b6870e4e8bc4f4c6a6320
)
SRC=package/Plugins/Linux/x64

DIR=${1:?usage: fetch-ort-cuda.sh DIR}
"$HERE/fetch-ort.sh" "$DIR"
STAMP=$DIR/.stamp-cuda
WANT="$PKG@$VER ${LIBS[*]}"

installed() {
  local i
  [[ -f $STAMP && $(<"$STAMP") == "$WANT" ]] || return 1
  for ((i = 0; i < ${#LIBS[@]}; i += 2)); do sha_ok "$DIR/${LIBS[i]}" "${LIBS[i+1]}" || return 1; done
}
installed && exit 0

log "fetching $PKG@$VER from npm (~180 MB)"
rm -f "$STAMP"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
npm_fetch "$PKG" "$VER" "$TGZ_SHA256" "$W"
members=()
for ((i = 0; i < ${#LIBS[@]}; i += 2)); do members+=("$SRC/${LIBS[i]}"); done
tar xzf "$W/$PKG-$VER.tgz" -C "$W" "${members[@]}" || die "provider libraries missing from $PKG-$VER.tgz"
for ((i = 0; i < ${#LIBS[@]}; i += 2)); do
  n=${LIBS[i]}
  sha_ok "$W/$SRC/$n" "${LIBS[i+1]}" || die "$n sha256 differs from the pin"
  install -m 0755 "$W/$SRC/$n" "$DIR/.$n.tmp"
  mv -f "$DIR/.$n.tmp" "$DIR/$n"
done
echo "$WANT" > "$STAMP"
log "installed CUDA providers in $DIR"
