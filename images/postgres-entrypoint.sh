#!/bin/sh
# Like the official postgres image with POSTGRES_HOST_AUTH_METHOD=trust: initialise $PGDATA on first start
# (user postgres, no password, every host trusted), then run the command (default: postgres).
set -e
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb -U postgres --auth=trust >/dev/null
  echo 'host all all all trust' >> "$PGDATA/pg_hba.conf"
fi
[ "$1" = postgres ] && shift && set -- postgres -c listen_addresses='*' "$@"
exec "$@"
