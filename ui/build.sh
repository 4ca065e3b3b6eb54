#!/usr/bin/env bash
# Builds the admin UI into ui/dist (served by the control plane at /):
#   the `ui` crate for wasm32 with the size-optimised `wasm-release` profile, then wasm-bindgen
#   (`--target web`), then the static files. Installs what is missing: the wasm32 target, and
#   wasm-bindgen-cli at exactly the version of the wasm-bindgen crate in Cargo.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$have" != "$want" ]; then
  echo "installing wasm-bindgen-cli $want (found: ${have:-none})"
  # Not --locked: a pinned dependency of its own lockfile is not on this registry.
  cargo install --quiet wasm-bindgen-cli --version "=$want"
fi
cargo build --quiet -p ui --target wasm32-unknown-unknown --profile wasm-release
rm -rf ui/dist.tmp && mkdir -p ui/dist.tmp
wasm-bindgen --target web --no-typescript --out-dir ui/dist.tmp --out-name ui \
  target/wasm32-unknown-unknown/wasm-release/ui.wasm
cp ui/static/* ui/dist.tmp/
rm -rf ui/dist && mv ui/dist.tmp ui/dist
echo "ui/dist: $(du -sh ui/dist | cut -f1) ($(stat -c %s ui/dist/ui_bg.wasm) bytes of wasm)"
