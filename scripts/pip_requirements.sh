# Sourced by the venv scripts: pip_requirements VENV FILE installs FILE's pinned packages into
# VENV, trying a second time after a pause when the first fails, since the usual cause on a
# fresh machine is a download cut off by the network, not the requirements. A second failure
# is the caller's error (set -e), with pip's own message above it.
pip_requirements() {
  local venv=$1 file=$2
  local pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --retries 8)
  if "${pip[@]}" -r "$file"; then return 0; fi
  echo "pip_requirements: installing $file into $venv failed; trying once more in 20 s" >&2
  sleep 20
  "${pip[@]}" -r "$file"
}
