#!/bin/sh
# Create (or update) the Secrets the Nexus base mounts, from `nexus admin init-secrets --dir DIR`:
#   nexus-secrets-<role>    DIR/<role>/workload/* (the role's .key; receivers also every .pub)
#   nexus-identity-keys     DIR/runtime-api/identity-keys/*.pem (runtime-api only)
#   nexus-webhook-secrets   DIR/integration/webhooks/* when that directory exists
# and, from environment variables when they are set (values never appear in a command line):
#   nexus-db-runtime, nexus-db-catalog, nexus-db-integration   key `url`, from
#     NEXUS_RUNTIME_DATABASE_URL, NEXUS_CATALOG_DATABASE_URL, NEXUS_INTEGRATION_DATABASE_URL
#   nexus-bootstrap-admin   key `password`, from NEXUS_BOOTSTRAP_ADMIN_PASSWORD
# Usage: [NAMESPACE=nexus] deploy/k8s/create-secrets.sh DIR
# Run it again after rotating a key: server-side apply replaces each Secret's keys with the
# files present now (a key file removed from DIR leaves the Secret too).
set -eu

ROLES="gateway runtime-api runtime-worker catalog integration app-sfcrm"
NAMESPACE=${NAMESPACE:-nexus}

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 DIR   (DIR: the output of \`nexus admin init-secrets --dir DIR\`)" >&2
    exit 2
fi
DIR=$1

apply() {  # apply NAME --from-...: create the Secret or replace its keys
    name=$1
    shift
    kubectl create secret generic "$name" --namespace "$NAMESPACE" "$@" \
        --dry-run=client --output yaml |
        kubectl apply --server-side --force-conflicts --field-manager=nexus-create-secrets \
            --filename -
}

for role in $ROLES; do
    if [ ! -f "$DIR/$role/workload/$role.key" ]; then
        echo "$0: missing $DIR/$role/workload/$role.key (run nexus admin init-secrets)" >&2
        exit 1
    fi
done
if ! ls "$DIR/runtime-api/identity-keys/"*.pem >/dev/null 2>&1; then
    echo "$0: no identity signing key in $DIR/runtime-api/identity-keys/" >&2
    exit 1
fi

for role in $ROLES; do
    apply "nexus-secrets-$role" --from-file="$DIR/$role/workload"
done
apply nexus-identity-keys --from-file="$DIR/runtime-api/identity-keys"
if [ -d "$DIR/integration/webhooks" ]; then
    apply nexus-webhook-secrets --from-file="$DIR/integration/webhooks"
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
umask 077
from_env() {  # from_env SECRET KEY VARIABLE: the variable's value as the Secret's one key
    eval "value=\${$3:-}"
    if [ -n "$value" ]; then
        printf '%s' "$value" >"$scratch/$2"
        apply "$1" --from-file="$2=$scratch/$2"
        rm -f "$scratch/$2"
    else
        echo "$0: $3 not set; Secret $1 left as it is" >&2
    fi
}
from_env nexus-db-runtime url NEXUS_RUNTIME_DATABASE_URL
from_env nexus-db-catalog url NEXUS_CATALOG_DATABASE_URL
from_env nexus-db-integration url NEXUS_INTEGRATION_DATABASE_URL
from_env nexus-bootstrap-admin password NEXUS_BOOTSTRAP_ADMIN_PASSWORD
