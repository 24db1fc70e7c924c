#!/usr/bin/env bash
# Creates the small Python virtual environment of official API clients that the compatibility
# tests drive against the server:
#   usage: scripts/clients.sh VENV
# VENV is the Makefile's $(CACHE)/clients/<sha256(requirements.txt)[:12]>. Installs exactly the
# pinned set in scripts/clients/requirements.txt (binary wheels only, from PyPI). Idempotent: a
# stamp holding the requirements hash is written last; a repeat run with the stamp is a no-op.
# Cold: ~240 MB on disk, ~40 s.
set -euo pipefail
ME=clients
log() { echo "$ME: $*" >&2; }
die() { echo "$ME: error: $*" >&2; exit 1; }
. "$(dirname "$0")/lib/pyvenv.sh"

VENV=${1:?usage: clients.sh VENV}
make_venv "$VENV" "$(cd "$(dirname "$0")/clients" && pwd)/requirements.txt" \
  'openai, tritonclient.http, tritonclient.grpc, huggingface_hub' \
  'the openai, tritonclient[grpc,http] and huggingface_hub clients and their dependencies, ~240 MB'
