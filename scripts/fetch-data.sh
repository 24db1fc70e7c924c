#!/usr/bin/env bash
# Fetches the Pang & Lee sentence polarity corpus (4000 movie-review sentences, 2000 positive /
# 2000 negative) and writes a fixed stratified 80/10/10 split:
#   usage: scripts/fetch-data.sh DATA_DIR
#   DATA_DIR/pang-lee.csv            raw copy of the corpus file (UTF-8 with BOM, labels 1 / -1)
#   DATA_DIR/{train,val,test}.csv    text,label with label negative|positive (3200/400/400)
#   DATA_DIR/.stamp                  written last
# Source: Debian bookworm package python3-pattern (pinned version and .deb sha256), member
# usr/share/doc/python3-pattern/test/corpora/polarity-en-pang&lee2.csv (pinned sha256). The
# package is only downloaded and unpacked (apt-get download + dpkg -x), never installed. The
# corpora README says they are for personal use, so the data is fetched at build time and is
# never committed. The split is done by scripts/data/split.py (system python3, stdlib only);
# its outputs are pinned too.
set -euo pipefail
ME=fetch-data
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

PKG=python3-pattern
VER=2.6+git20180818-4
DEB_SHA256=9bdb8e36c780db9c701fa9519425c0217fbab2bc1af28eb127caaa6bde7fc4b1
MEMBER='usr/share/doc/python3-pattern/test/corpora/polarity-en-pang&lee2.csv'
CSV_SHA256=1b9975e7c33f487bc2187fffdc55213fdbb84bac4f6c1852b5dd40912411f53f
TRAIN_SHA256=c229f174b1ec2126ecaba987f22521b0d7e330347149487206c279856d1547ba
VAL_SHA256=9dd5e5938139f3a3f637522217bec252b389af5b6f27af87386fe0be2cc3633d
TEST_SHA256=7f7c3c5593a8f02293234ad03de2893c4ea5b52b944a2c193e65527f60275c4b

DIR=${1:?usage: fetch-data.sh DATA_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
STAMP=$DIR/.stamp
WANT="$PKG=$VER $CSV_SHA256 $TRAIN_SHA256 $VAL_SHA256 $TEST_SHA256"
sha() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f $STAMP && $(<"$STAMP") == "$WANT" ]]; then
  exit 0
fi

mkdir -p "$DIR"
rm -f "$STAMP"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
command -v apt-get >/dev/null || die "apt-get not found (the corpus comes from Debian's $PKG)"
deb=$W/$PKG.deb
dl() { (cd "$W" && apt-get download -q "$PKG=$VER" >/dev/null 2>"$W/apt.err"); }
log "downloading Debian $PKG=$VER (16 MB, not installed)"
if ! dl; then
  log "apt-get download failed; running apt-get update"
  apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed"
  dl || die "apt-get download $PKG=$VER failed: $(tail -1 "$W/apt.err")"
fi
mv "$W"/"${PKG}"_*.deb "$deb" 2>/dev/null || die "apt-get download left no .deb"
[[ $(sha "$deb") == "$DEB_SHA256" ]] || die "$PKG .deb sha256 is $(sha "$deb"), pinned $DEB_SHA256"
dpkg -x "$deb" "$W/x" || die "dpkg -x failed"
[[ -f $W/x/$MEMBER ]] || die "$MEMBER missing from the package"
[[ $(sha "$W/x/$MEMBER") == "$CSV_SHA256" ]] || die "corpus sha256 is $(sha "$W/x/$MEMBER"), pinned $CSV_SHA256"
cp "$W/x/$MEMBER" "$DIR/.pang-lee.csv.tmp" && mv -f "$DIR/.pang-lee.csv.tmp" "$DIR/pang-lee.csv"

python3 "$HERE/data/split.py" "$DIR/pang-lee.csv" "$DIR" || die "split failed"
for s in train:$TRAIN_SHA256 val:$VAL_SHA256 test:$TEST_SHA256; do
  f=$DIR/${s%%:*}.csv
  [[ $(sha "$f") == "${s#*:}" ]] || die "$f sha256 is $(sha "$f"), pinned ${s#*:} (split.py changed?)"
done
echo "$WANT" > "$STAMP"
log "ready: $DIR (train 3200, val 400, test 400)"
