#!/usr/bin/env bash
# Install Debian packages the tests or the demo need when a file they provide is missing:
#   tools/apt_install.sh /usr/bin/chromium=chromium /usr/bin/chromedriver=chromium-driver
# As root, or with passwordless sudo; otherwise it says what to install and fails.
set -euo pipefail
missing=()
for pair in "$@"; do
  [ -e "${pair%%=*}" ] || missing+=("${pair#*=}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then as_root=(); elif sudo -n true 2>/dev/null; then as_root=(sudo -n); else
  echo "apt: ${missing[*]} missing and not root: install them (apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "apt: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q >/dev/null
"${as_root[@]}" apt-get install -y -q "${missing[@]}" >/dev/null
