#!/bin/sh
# The compose stack's key material, made once into its volumes (compose.yaml, service `keys`).
# Runs as root to give each file to the one user that reads it; never overwrites a file:
# the audit trail's data keys and checkpoints need the keys they were made with.
set -eu
# The folders are the volumes' mount points in compose.yaml (overridable for the tests).
keys=${LOCALGATE_KEYS_DIR:-/etc/localgate/keys}
postgres=${LOCALGATE_POSTGRES_SECRET_DIR:-/run/localgate-postgres}
grafana=${LOCALGATE_GRAFANA_SECRET_DIR:-/run/localgate-grafana}
# The image's localgate user (Dockerfile).
owner=${LOCALGATE_KEYS_OWNER:-10001:10001}
umask 077

# The audit master key, the checkpoint signing key and the thought-signature seal key
# (seal.key, proxy.signature_key_file), shared by every replica.
if [ ! -e "$keys/master.key" ]; then
    localgate audit keygen --out "$keys"
fi
if [ ! -e "$postgres/password" ]; then
    python -c 'import secrets; print(secrets.token_urlsafe(32))' > "$postgres/password"
fi
if [ ! -e "$grafana/admin-password" ]; then
    python -c 'import secrets; print(secrets.token_urlsafe(24))' > "$grafana/admin-password"
fi
# libpq's password file (PGPASSFILE): host:port:database:user:password, owner-only.
printf 'postgres:5432:localgate:localgate:%s\n' "$(cat "$postgres/password")" > "$keys/pgpass"

chown -R "$owner" "$keys"
chmod 0700 "$keys"
chmod 0600 "$keys"/*
# Read by the postgres and grafana containers' own users; only they mount these volumes.
chmod 0755 "$postgres" "$grafana"
chmod 0444 "$postgres/password" "$grafana/admin-password"
echo "keys ready in $keys"
