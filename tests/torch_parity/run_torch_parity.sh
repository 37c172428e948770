#!/usr/bin/env bash
# The parity check against PyTorch: torch_reference.py (the peer's interpreter) writes inputs and
# PyTorch's outputs into a temporary directory, and the torch_parity binary compares distgrad's.
# Skipped (exit 77) without the peer (scripts/install_peer.sh installs it).
#   run_torch_parity.sh TORCH_PARITY_BINARY
set -euo pipefail
binary=$1
python=${DISTGRAD_PEER_VENV:-$HOME/.venvs/distgrad-peer}/bin/python
if ! [[ -x "$python" ]] || ! "$python" -c "import torch, safetensors" 2>/dev/null; then
  echo "SKIP: no peer interpreter with torch and safetensors at $python (scripts/install_peer.sh)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" "$(dirname "$0")/torch_reference.py" "$dir"
"$binary" "$dir"
