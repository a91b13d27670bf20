#!/usr/bin/env bash
# Install the system packages the test suite needs, when missing: the MariaDB server (the
# tests start their own mariadbd; no system service is used) and Chromium (the browser CRM
# suite drives Debian's /usr/bin/chromium through Playwright). With --galera also the Galera
# provider and rsync (`make test-galera` starts a 3-node cluster). Only acts as root on Debian.
set -euo pipefail

have_mariadb() {
  command -v mariadbd >/dev/null 2>&1 || command -v mysqld >/dev/null 2>&1 \
    || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]
}

have_chromium() {
  [ -x /usr/bin/chromium ]
}

have_galera() {
  [ -f /usr/lib/galera/libgalera_smm.so ] && command -v rsync >/dev/null 2>&1
}

missing=()
have_mariadb || missing+=(mariadb-server mariadb-client)
have_chromium || missing+=(chromium)
if [ "${1:-}" = "--galera" ]; then
  have_galera || missing+=(galera-4 rsync)
fi
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || [ ! -f /etc/debian_version ]; then
  echo "note: ${missing[*]} not found and cannot be installed automatically here;" \
       "the tests that need them will be skipped." >&2
  exit 0
fi
echo "installing ${missing[*]} (apt-get)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's package may start a system service through policy-rc.d; the tests never use it.
if command -v service >/dev/null 2>&1; then service mariadb stop >/dev/null 2>&1 || true; fi
have_mariadb && have_chromium && { [ "${1:-}" != "--galera" ] || have_galera; }
