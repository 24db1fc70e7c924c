# Sourced by fetch-ort.sh and fetch-ort-cuda.sh: logging, sha256 checks and npm tarball download.
# ME names the calling script in messages; everything goes to stderr.
ME=${ME:-$(basename "$0" .sh)}
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

# sha_ok FILE SHA256 — true when FILE exists and hashes to SHA256.
sha_ok() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]; }

# npm_fetch NAME VERSION SHA256 DEST_DIR — leaves DEST_DIR/NAME-VERSION.tgz (unscoped names only),
# checked against SHA256. Uses `npm pack` (and npm's own cache, outside the repo) when npm is
# installed; otherwise curl from the registry, so a build image needs only curl. NPM_REGISTRY
# overrides the registry for the curl path.
npm_fetch() {
  local name=$1 ver=$2 sha=$3 dst=$4 tgz="$1-$2.tgz" got
  if command -v npm >/dev/null; then
    (cd "$dst" && npm pack --silent "$name@$ver" >/dev/null) || die "npm pack $name@$ver failed"
  else
    command -v curl >/dev/null || die "need npm or curl to download $name@$ver"
    curl -fsSL --retry 3 -o "$dst/$tgz" "${NPM_REGISTRY:-https://registry.npmjs.org}/$name/-/$tgz" \
      || die "download of $name@$ver from ${NPM_REGISTRY:-https://registry.npmjs.org} failed"
  fi
  [[ -f $dst/$tgz ]] || die "npm pack did not produce $tgz"
  got=$(sha256sum "$dst/$tgz" | cut -d' ' -f1)
  [[ $got == "$sha" ]] || die "$tgz sha256 is $got, pinned $sha"
}
