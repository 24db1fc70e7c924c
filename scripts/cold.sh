#!/usr/bin/env bash
# Times a README command as a new user meets it: a fresh clone of this repository, with every
# cache empty (ortserve's, Go's module and build caches, cargo's registry, npm's, golangci-lint's;
# pip runs without its cache).
#   usage: scripts/cold.sh DIR run|test
#   run:  `make run` until POST /embed answers on 127.0.0.1:18777, then stops it
#   test: `make test` to its end
# DIR is emptied first; the clone, caches and make.log stay in it. Needs the network (the
# registries the Makefile uses) and a quiet machine, for the figure to mean anything.
set -uo pipefail
B=${1:?usage: scripts/cold.sh DIR run|test} TARGET=${2:?usage: scripts/cold.sh DIR run|test}
[[ $TARGET == run || $TARGET == test ]] || { echo "cold: run or test, not $TARGET" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$B"; mkdir -p "$B"
git clone -q "$REPO" "$B/repo"
export ORTSERVE_CACHE=$B/cache GOMODCACHE=$B/gomod GOCACHE=$B/gocache CARGO_HOME=$B/cargo \
  npm_config_cache=$B/npm PIP_NO_CACHE_DIR=1 GOLANGCI_LINT_CACHE=$B/golangci XDG_CACHE_HOME=$B/xdg
# rustup's proxies live in ~/.cargo/bin; the registry goes to the empty CARGO_HOME.
[[ -d $HOME/.cargo/bin ]] && cp -r "$HOME/.cargo/bin" "$B/cargo-bin" && export PATH=$B/cargo-bin:$PATH
cd "$B/repo" || exit 1
start=$(date +%s)
if [[ $TARGET == run ]]; then
  make run ADDR=127.0.0.1:18777 > "$B/make.log" 2>&1 &
  pid=$!
  until curl -sf -X POST 127.0.0.1:18777/embed -H 'Content-Type: application/json' -d '{"inputs":"hello world"}' > "$B/answer.json" 2>/dev/null; do
    sleep 2
    kill -0 $pid 2>/dev/null || { echo "cold: make run exited; see $B/make.log" >&2; exit 1; }
  done
  echo "cold make run: first answer after $(( $(date +%s) - start )) s"
  pkill -f "serve --addr 127.0.0.1:18777"; wait $pid
else
  make test > "$B/make.log" 2>&1; rc=$?
  echo "cold make test: exit $rc after $(( $(date +%s) - start )) s"
  exit $rc
fi
