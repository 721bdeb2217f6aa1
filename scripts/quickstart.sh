#!/usr/bin/env bash
# The README's first command: installs what ronde needs (Debian packages; PyPI packages into
# the virtual environment .venv), builds and installs ronde into .venv with pip, and runs
# ronde's main job: 2-rank data-parallel training on current PyTorch, started by `ronde run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/setup_python.sh
echo "== .venv/bin/ronde run -np 2: data-parallel training of an MLP on the digits data (torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')) =="
.venv/bin/ronde run -np 2 .venv/bin/python examples/train_digits.py
