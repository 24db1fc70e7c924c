#!/usr/bin/env bash
# Creates the small Python virtual environment of official API clients that the compatibility
# tests drive against the server:
#   usage: scripts/clients.sh VENV
# VENV is the Makefile's $(CACHE)/clients/<sha256(requirements.txt)[:12]>. Installs exactly the
# pinned set in scripts/clients/requirements.txt (binary wheels only, from PyPI). Idempotent: a
# stamp holding the requirements hash is written last; a repeat run with the stamp is a no-op.
# Cold: ~70 MB on disk, ~15 s.
set -euo pipefail
ME=clients
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }

VENV=${1:?usage: clients.sh VENV}
REQ=$(cd "$(dirname "$0")/clients" && pwd)/requirements.txt
[[ -f $REQ ]] || die "missing $REQ"
WANT=$(sha256sum "$REQ" | cut -d' ' -f1)
STAMP=$VENV/.stamp
if [[ -f $STAMP && $(<"$STAMP") == "$WANT" && -x $VENV/bin/python ]]; then
  exit 0
fi

PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "$PY not found (need CPython 3.11)"
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ $PYVER == 3.11 ]] || die "$PY is Python $PYVER; the pinned wheels are for CPython 3.11"

log "creating $VENV (the openai client and its dependencies, ~70 MB)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$VENV/bin/python" -m pip install -q --no-cache-dir --only-binary=:all: -r "$REQ" >&2 \
  || { rm -rf "$VENV"; die "pip install -r $REQ failed"; }
"$VENV/bin/python" -c 'import openai' \
  || { rm -rf "$VENV"; die "installed venv cannot import its packages"; }
echo "$WANT" > "$STAMP"
log "ready: $VENV"
