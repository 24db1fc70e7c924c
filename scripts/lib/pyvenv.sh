# Shared by scripts/venv.sh and scripts/clients.sh: make_venv VENV REQUIREMENTS IMPORTS WHAT [PIP_OPTION...]
# creates VENV with exactly the pinned REQUIREMENTS (binary wheels from PyPI; PIP_OPTIONs, such as
# --no-deps for a complete lock, are added to pip install), checks that
# `import IMPORTS` works, and writes a stamp holding the requirements' sha256 last, so a
# repeat run with the stamp is a no-op. The caller defines log and die.
make_venv() {
  local venv=$1 req=$2 imports=$3 what=$4
  local opts=("${@:5}")
  [[ -f $req ]] || die "missing $req"
  local want stamp=$venv/.stamp
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [[ -f $stamp && $(<"$stamp") == "$want" && -x $venv/bin/python ]]; then
    return 0
  fi
  local py=${PYTHON:-python3} pyver
  command -v "$py" >/dev/null || die "$py not found (need CPython 3.11)"
  pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [[ $pyver == 3.11 ]] || die "$py is Python $pyver; the pinned wheels are for CPython 3.11"

  log "creating $venv ($what)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
    "$venv/bin/python" -m pip install -q --no-cache-dir --only-binary=:all: "${opts[@]}" -r "$req" >&2 \
    || { rm -rf "$venv"; die "pip install -r $req failed"; }
  "$venv/bin/python" -c "import $imports" \
    || { rm -rf "$venv"; die "installed venv cannot import its packages"; }
  echo "$want" > "$stamp"
  log "ready: $venv"
}
