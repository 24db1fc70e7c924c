#!/usr/bin/env bash
# Builds libtokenizers.a, the Rust half of github.com/daulet/tokenizers v1.24.0 (Hugging Face
# tokenizers 0.22.0 behind a C ABI), into TOK_DIR (the Makefile's TOK_DIR):
#   TOK_DIR/libtokenizers.a, TOK_DIR/.stamp
# Sources: the Go module's own copy (go mod download, checked against go.sum), with our
# scripts/tokenizers/Cargo.toml + Cargo.lock laid over it. Upstream takes tiktoken-rs from a GitHub
# branch; ours takes tiktoken-rs 0.7.0 from crates.io, so the build needs crates.io only.
# scripts/tokenizers/*.patch, if any, are applied to the sources (patch -p1).
# The source copy and CARGO_TARGET_DIR live in TOK_DIR/../.build, shared by every TOK_DIR, so a
# changed lock file rebuilds incrementally. A repeat run only re-hashes the library.
#   usage: scripts/build-tokenizers.sh TOK_DIR
set -euo pipefail
ME=build-tokenizers
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

MOD=github.com/daulet/tokenizers
MOD_VERSION=v1.24.0
SYMBOL=tokenizers_version_1_23_0   # tokenizer.go of v1.24.0 links against this

HERE=$(cd "$(dirname "$0")" && pwd)
OVERLAY=$HERE/tokenizers
OUT=${1:?usage: build-tokenizers.sh TOK_DIR}
STAMP=$OUT/.stamp

if [[ -f $STAMP && -f $OUT/libtokenizers.a ]] && (cd "$OUT" && sha256sum -c --quiet .stamp >/dev/null 2>&1); then
  exit 0
fi
for t in go cargo nm; do command -v $t >/dev/null || die "$t not found in PATH"; done

# The overlay is written for one version of the Go module: refuse to build it for another.
gomod=$(cd "$HERE/.." && go list -m -f '{{.Version}}' "$MOD" 2>/dev/null) || die "cannot read $MOD from go.mod"
[[ $gomod == "$MOD_VERSION" ]] || die "go.mod has $MOD $gomod; scripts/tokenizers is for $MOD_VERSION (update both)"
json=$(cd "$HERE/.." && go mod download -json "$MOD@$MOD_VERSION") || die "go mod download $MOD@$MOD_VERSION failed"
SRC=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
[[ -n $SRC && -f $SRC/Cargo.toml ]] || die "no module directory in: go mod download -json $MOD@$MOD_VERSION"

BUILD=$(dirname "$OUT")/.build
mkdir -p "$BUILD" "$OUT"
exec 9>"$BUILD/lock"
flock 9   # one build at a time per cache

rm -f "$STAMP"
W=$BUILD/src
rm -rf "$W"
mkdir -p "$W"
cp -Rp "$SRC/src" "$SRC/benches" "$SRC/tokenizers.h" "$W/"
cp -p "$OVERLAY/Cargo.toml" "$OVERLAY/Cargo.lock" "$W/"
chmod -R u+w "$W"   # the module cache is read-only
shopt -s nullglob
for p in "$OVERLAY"/*.patch; do
  log "applying $(basename "$p")"
  patch -d "$W" -p1 --forward --silent <"$p" || die "patch $(basename "$p") does not apply"
done

log "cargo build --release --locked ($MOD@$MOD_VERSION)"
start=$SECONDS
(cd "$W" && CARGO_TARGET_DIR=$BUILD/target cargo build --release --locked --lib) >&2 \
  || die "cargo build failed (see above)"
log "built in $((SECONDS - start)) s"

LIB=$BUILD/target/release/libtokenizers.a
# grep without -q: an early exit would SIGPIPE nm and fail the pipeline under pipefail.
nm -g --defined-only "$LIB" 2>/dev/null | grep " T $SYMBOL\$" >/dev/null || die "$LIB does not export $SYMBOL"
cp "$LIB" "$OUT/.libtokenizers.a.tmp"
mv -f "$OUT/.libtokenizers.a.tmp" "$OUT/libtokenizers.a"
(cd "$OUT" && sha256sum libtokenizers.a) >"$STAMP"
log "installed $OUT/libtokenizers.a"
