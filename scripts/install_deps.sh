#!/usr/bin/env bash
# Installs the Debian 12 packages ronde builds, tests and benchmarks with. Idempotent.
# (Java 17 is for the Spark tests, libgomp1/libquadmath0 for MXNet's wheel; the PyPI packages come in venvs, scripts/setup_*.sh.)
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev googletest libbenchmark-dev nlohmann-json3-dev libcli11-dev
  libopenmpi-dev openmpi-bin libgloo-dev libyaml-dev
  python3 python3-dev python3-venv python3-pytest python3-numpy python3-sklearn
  python3-torch libtorch-dev libopenblas0-pthread
  openssh-server openssh-client iproute2 procps util-linux
  clang libclang-rt-14-dev ccache
  openjdk-17-jre-headless libgomp1 libquadmath0
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
