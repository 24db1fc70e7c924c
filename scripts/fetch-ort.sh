#!/usr/bin/env bash
# Installs the ONNX Runtime 1.29.0 C library (linux x86-64) into DIR, the Makefile's ORT_DIR:
#   DIR/libonnxruntime.so.1, DIR/libonnxruntime.so -> libonnxruntime.so.1, DIR/.stamp
# Source: the npm package onnxruntime-node@1.29.0, file package/bin/napi-v6/linux/x64/
# libonnxruntime.so.1 (Microsoft's release build; the same library drives the CUDA provider that
# fetch-ort-cuda.sh adds). The tarball and the library sha256 are pinned below. A repeat run only
# re-hashes the installed library.
#   usage: scripts/fetch-ort.sh DIR
set -euo pipefail
. "$(dirname "$0")/lib/npm.sh"

PKG=onnxruntime-node
VER=1.29.0
TGZ_SHA256=cfdfb45ec4044b1fdca43e5d2e180fb6817e649ff8ad1e0dfc90e18e51b67037
LIB_SHA256=89688f5cf51c7e31befbb7b9101bc027799009b18d1baa9a5b1146a72e69538d
MEMBER=package/bin/napi-v6/linux/x64/libonnxruntime.so.1

DIR=${1:?usage: fetch-ort.sh DIR}
STAMP=$DIR/.stamp
WANT="$PKG@$VER $LIB_SHA256"

if [[ -f $STAMP && $(<"$STAMP") == "$WANT" && -L $DIR/libonnxruntime.so ]] \
    && sha_ok "$DIR/libonnxruntime.so.1" "$LIB_SHA256"; then
  exit 0
fi
[[ $(uname -s)/$(uname -m) == Linux/x86_64 ]] || die "only linux x86-64 is pinned, this is $(uname -s)/$(uname -m)"

log "fetching $PKG@$VER from npm (~110 MB)"
mkdir -p "$DIR"
rm -f "$STAMP"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
npm_fetch "$PKG" "$VER" "$TGZ_SHA256" "$W"
tar xzf "$W/$PKG-$VER.tgz" -C "$W" "$MEMBER" || die "$MEMBER missing from $PKG-$VER.tgz"
sha_ok "$W/$MEMBER" "$LIB_SHA256" || die "libonnxruntime.so.1 sha256 differs from the pin"
install -m 0755 "$W/$MEMBER" "$DIR/.libonnxruntime.so.1.tmp"
mv -f "$DIR/.libonnxruntime.so.1.tmp" "$DIR/libonnxruntime.so.1"
ln -sfn libonnxruntime.so.1 "$DIR/libonnxruntime.so"
echo "$WANT" > "$STAMP"
log "installed $DIR/libonnxruntime.so.1"
