#!/usr/bin/env bash
# What a new user does: a fresh venv, `pip install .` with pip's own isolated build (its
# build requirements from PyPI, never torch), torch from PyPI, then `import ronde.torch` and a
# 2-rank job through the installed `ronde` command. Prints one line per check.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache_env.sh
work=$(mktemp -d /tmp/ronde-fresh.XXXXXX)
build=$PWD/build-fresh  # in the checkout, so ccache (scripts/ccache_env.sh) can share objects
rm -rf "$build"
trap 'rm -rf "$work" "$build"' EXIT
python3 -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip -q --disable-pip-version-check)
"${pip[@]}" install --config-settings=build-dir="$build" .
"${pip[@]}" install torch==2.13.0 numpy==2.4.6
source_tree=$PWD
cd "$work"  # away from the source tree, so only the installed package can be imported
# Every module of python/ronde is in the installed package (an exclude pattern once dropped
# ronde/common/build_info.py from every wheel).
"$work/venv/bin/python" - "$source_tree/python/ronde" <<'PY'
import os, pathlib, sys
import ronde
source = pathlib.Path(sys.argv[1])
installed = pathlib.Path(ronde.__file__).parent
missing = [str(p.relative_to(source)) for p in source.rglob("*.py")
           if "__pycache__" not in p.parts and not (installed / p.relative_to(source)).exists()]
assert not missing, f"missing from the installed package: {missing}"
print(f"fresh install: all {sum(1 for _ in source.rglob('*.py'))} modules of python/ronde installed")
PY
"$work/venv/bin/python" -c "import ronde.torch as hvd, ronde; print('fresh install: import ronde.torch ok, ronde', ronde.__version__)"
"$work/venv/bin/ronde" check-build | grep -q "PyTorch (torch 2.13.0" && echo "fresh install: ronde check-build sees torch 2.13.0"
cat > job.py <<'PY'
import torch
import ronde.torch as hvd
hvd.init()
total = hvd.allreduce(torch.arange(4.0) * (hvd.rank() + 1), op=hvd.Sum, name="t")
assert total.tolist() == [0.0, 3.0, 6.0, 9.0], total
print("rank", hvd.rank(), "of", hvd.size(), "ok")
PY
# `python`, not a path: the installed ronde puts its own venv first on the workers' PATH.
"$work/venv/bin/ronde" run -np 2 python job.py
echo "fresh install: 2-rank job through the installed ronde command ok"
