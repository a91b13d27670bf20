#!/usr/bin/env bash
# Builds, once, the local base images the container test (scripts/image-test.sh) uses instead
# of pulling from a registry (none is reachable from CI or the developers' machines):
#
#   localhost/nexus-test/bookworm:minbase   debootstrap --variant=minbase of Debian 12
#   localhost/nexus-test/python:3.11        + python3 python3-venv python3-pip ca-certificates
#   localhost/nexus-test/node:20            + this host's Node 20 and npm (Debian's 18 is too old for Vite 5)
#   localhost/mariadb:10.11                 + Debian's mariadb-server (10.11) and a small entrypoint
#                                           that behaves like the official image's for our use
#
# Every image trusts what this host trusts: the host's extra CA certificates
# (/usr/local/share/ca-certificates/*.crt) are installed with update-ca-certificates, so pip
# and npm verify TLS exactly as on the host (nothing is switched off).
#
# An image that exists is kept; NEXUS_BASE_REBUILD=1 rebuilds all of them.
# Needs root, podman (configured as image-test.sh does: CONTAINERS_CONF) and debootstrap.
set -euo pipefail

REBUILD="${NEXUS_BASE_REBUILD:-0}"
SUITE=bookworm
MINBASE=localhost/nexus-test/bookworm:minbase
PYTHON_BASE="${PYTHON_BASE_IMAGE:-localhost/nexus-test/python:3.11}"
NODE_BASE="${NODE_BASE_IMAGE:-localhost/nexus-test/node:20}"
MARIADB_BASE="${MARIADB_BASE_IMAGE:-localhost/mariadb:10.11}"

log() { printf '[base-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

# The Debian mirror this machine's apt uses (deb822 or one-line sources), unless DEBIAN_MIRROR.
debian_mirror() {
  if [[ -n "${DEBIAN_MIRROR:-}" ]]; then echo "$DEBIAN_MIRROR"; return; fi
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    uri=$(awk -v s="$SUITE" '
      /^URIs:/ {u=$2} /^Suites:/ {for (i=2;i<=NF;i++) if ($i==s) ok=1}
      /^$/ {if (ok && u!="") {print u; exit} ok=0; u=""}
      END {if (ok && u!="") print u}' "$f" | head -n1)
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    uri=$(awk -v s="$SUITE" '$1=="deb" && $0 !~ /security/ {
      for (i=2;i<=NF;i++) if ($i==s) {for (j=2;j<i;j++) if ($j ~ /^[a-z]+:\/\//) {print $j; exit}}}' "$f")
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
  echo "http://deb.debian.org/debian"
}

have() { [[ "$REBUILD" != 1 ]] && podman image exists "$1"; }

WORK=$(mktemp -d /var/tmp/nexus-base.XXXXXX)
cleanup() {
  # a failed debootstrap may leave its /proc etc. mounted
  local m
  for m in $(awk -v w="$WORK" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r); do umount -l "$m" || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# Host trust, for every image: the extra CA certificates this machine adds to Debian's bundle.
mkdir -p "$WORK/ca"
shopt -s nullglob
for c in /usr/local/share/ca-certificates/*.crt /usr/local/share/ca-certificates/*/*.crt; do
  cp "$c" "$WORK/ca/"
done
shopt -u nullglob

# ---------------------------------------------------------------- minbase
if ! have "$MINBASE"; then
  mirror=$(debian_mirror)
  log "debootstrap $SUITE minbase from $mirror"
  t0=$SECONDS
  timeout 900 debootstrap --variant=minbase --components=main "$SUITE" "$WORK/rootfs" "$mirror" \
    >"$WORK/debootstrap.log" 2>&1 || { tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap"; }
  # apt inside the images uses the same mirror (plus security updates when it is Debian's)
  {
    echo "deb $mirror $SUITE main"
    echo "deb $mirror $SUITE-updates main"
    if [[ "$mirror" == *deb.debian.org* ]]; then
      echo "deb ${mirror%/debian}/debian-security $SUITE-security main"
    fi
  } >"$WORK/rootfs/etc/apt/sources.list"
  # images carry no apt lists, caches or docs they do not need
  cat >"$WORK/rootfs/etc/dpkg/dpkg.cfg.d/01-nexus-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    >"$WORK/rootfs/etc/apt/apt.conf.d/01-nexus-norecommends"
  printf '#!/bin/sh\nexit 101\n' >"$WORK/rootfs/usr/sbin/policy-rc.d"
  chmod 0755 "$WORK/rootfs/usr/sbin/policy-rc.d"
  rm -rf "$WORK/rootfs/var/lib/apt/lists/"* "$WORK/rootfs/var/cache/apt/"*.bin \
    "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/log/"*.log
  tar -C "$WORK/rootfs" --numeric-owner -cf - . |
    podman import --quiet --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$MINBASE" >/dev/null
  rm -rf "$WORK/rootfs"
  log "minbase built in $((SECONDS - t0))s"
fi

# the CA step every image runs first
ca_step='COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update -q \
 && apt-get install -y -q ca-certificates \
 && update-ca-certificates \
 && rm -rf /var/lib/apt/lists/*'

build() {  # build TAG CONTAINERFILE_TEXT
  local tag=$1 text=$2 t0=$SECONDS
  log "building $tag"
  printf '%s\n' "$text" >"$WORK/Containerfile"
  timeout 1200 podman build --pull=never --network=host -t "$tag" -f "$WORK/Containerfile" "$WORK" \
    >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log" >&2; die "podman build $tag"; }
  log "$tag built in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- python
if ! have "$PYTHON_BASE"; then
  build "$PYTHON_BASE" "FROM $MINBASE
$ca_step
RUN apt-get update -q \\
 && apt-get install -y -q python3 python3-venv python3-pip \\
 && rm -rf /var/lib/apt/lists/*
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \\
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \\
    PIP_DISABLE_PIP_VERSION_CHECK=1 \\
    PIP_DEFAULT_TIMEOUT=180
CMD [\"python3\"]"
fi

# ---------------------------------------------------------------- node
if ! have "$NODE_BASE"; then
  node_bin=$(command -v node || true)
  [[ -n "$node_bin" ]] || die "no node on this host to copy into $NODE_BASE"
  node_major=$("$node_bin" -p 'process.versions.node.split(".")[0]')
  [[ "$node_major" -ge 20 ]] || die "host node is $("$node_bin" --version); Vite 5 needs >= 18, the image wants 20"
  node_modules=$(dirname "$(dirname "$(readlink -f "$node_bin")")")/lib/node_modules
  [[ -d "$node_modules/npm" ]] || die "no npm beside $node_bin ($node_modules/npm)"
  mkdir -p "$WORK/node/bin" "$WORK/node/lib"
  cp -a "$(readlink -f "$node_bin")" "$WORK/node/bin/node"
  cp -a "$node_modules" "$WORK/node/lib/node_modules"
  # the same set a nodejs .deb installs; the binary links only libc, libstdc++ and libgcc
  build "$NODE_BASE" "FROM $MINBASE
$ca_step
RUN apt-get update -q \\
 && apt-get install -y -q libstdc++6 libgcc-s1 \\
 && rm -rf /var/lib/apt/lists/*
COPY node/bin/node /usr/local/bin/node
COPY node/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && node --version && npm --version
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \\
    npm_config_cafile=/etc/ssl/certs/ca-certificates.crt \\
    npm_config_update_notifier=false \\
    npm_config_fund=false \\
    npm_config_audit=false
CMD [\"node\"]"
fi

# ---------------------------------------------------------------- mariadb
if ! have "$MARIADB_BASE"; then
  cat >"$WORK/docker-entrypoint.sh" <<'EOF'
#!/bin/bash
# A small stand-in for the official mariadb image's entrypoint: on an empty datadir it
# initializes it, sets the root password (MARIADB_ROOT_PASSWORD), runs
# /docker-entrypoint-initdb.d/*.sql once on a server that listens on no TCP port, then runs
# mariadbd listening on all interfaces.
set -euo pipefail
DATADIR=/var/lib/mysql
mkdir -p "$DATADIR" /run/mysqld
chown mysql:mysql "$DATADIR" /run/mysqld
if [[ ! -d "$DATADIR/mysql" ]]; then
  echo "entrypoint: initializing $DATADIR"
  mariadb-install-db --user=mysql --datadir="$DATADIR" --skip-test-db \
    --auth-root-authentication-method=socket >/dev/null
  sock=/run/mysqld/init.sock
  mariadbd --user=mysql --datadir="$DATADIR" --skip-name-resolve --skip-networking --socket="$sock" &
  pid=$!
  for _ in $(seq 60); do mariadb-admin --socket="$sock" ping >/dev/null 2>&1 && break; sleep 1; done
  mariadb-admin --socket="$sock" ping >/dev/null
  if [[ -n "${MARIADB_ROOT_PASSWORD:-}" ]]; then
    # root keeps socket authentication (the healthcheck), and gains the password
    pw=${MARIADB_ROOT_PASSWORD//\\/\\\\}; pw=${pw//\'/\\\'}
    mariadb --socket="$sock" -e "ALTER USER root@localhost IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('$pw');"
  fi
  shopt -s nullglob
  for f in /docker-entrypoint-initdb.d/*.sql; do
    echo "entrypoint: running $f"
    mariadb --socket="$sock" <"$f"
  done
  mariadb-admin --socket="$sock" shutdown
  wait "$pid" || true
  echo "entrypoint: initialized"
fi
exec mariadbd --user=mysql --datadir="$DATADIR" --skip-name-resolve --bind-address=0.0.0.0 "$@"
EOF
  cat >"$WORK/healthcheck.sh" <<'EOF'
#!/bin/bash
# The subset of the official mariadb image's healthcheck.sh that deploy/compose.yaml uses:
#   --connect              the server accepts connections and is not the init-time server
#                          (which runs with skip_networking)
#   --innodb_initialized   InnoDB has started
set -uo pipefail
q() { mariadb --socket=/run/mysqld/mysqld.sock -N -B -e "$1" 2>/dev/null; }
for arg in "$@"; do
  case "$arg" in
    --connect) [[ "$(q 'SELECT @@skip_networking')" == 0 ]] || exit 1 ;;
    --innodb_initialized)
      [[ "$(q "SELECT 1 FROM information_schema.ENGINES WHERE engine='InnoDB' AND support IN ('YES','DEFAULT')")" == 1 ]] || exit 1 ;;
    --*) ;;
  esac
done
exit 0
EOF
  chmod 0755 "$WORK/docker-entrypoint.sh" "$WORK/healthcheck.sh"
  build "$MARIADB_BASE" "FROM $MINBASE
$ca_step
RUN apt-get update -q \\
 && apt-get install -y -q mariadb-server mariadb-client \\
 && rm -rf /var/lib/apt/lists/* /var/lib/mysql/* /etc/mysql/mariadb.conf.d/50-server.cnf.dpkg* \\
 && mkdir -p /docker-entrypoint-initdb.d /run/mysqld \\
 && chown mysql:mysql /var/lib/mysql /run/mysqld
COPY docker-entrypoint.sh healthcheck.sh /usr/local/bin/
VOLUME /var/lib/mysql
EXPOSE 3306
ENTRYPOINT [\"docker-entrypoint.sh\"]"
fi

log "base images ready: $PYTHON_BASE $NODE_BASE $MARIADB_BASE"
