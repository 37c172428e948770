#!/usr/bin/env bash
# Installs the peer used by bench/ for side-by-side figures (PyTorch, TorchOpt; and safetensors, for
# the parity check tests/torch_parity) into a virtual environment outside the repository. Never a
# dependency of the build; the tests that use it skip without it.
#   scripts/install_peer.sh            # -> ${DISTGRAD_PEER_VENV:-$HOME/.venvs/distgrad-peer}
set -euo pipefail
venv=${DISTGRAD_PEER_VENV:-$HOME/.venvs/distgrad-peer}
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import torch, torchopt, safetensors" 2>/dev/null; then
  echo "$venv"
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet torch torchopt safetensors
echo "$venv"
