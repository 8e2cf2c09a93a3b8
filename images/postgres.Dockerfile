# PostgreSQL from Debian, for docker-compose.yml where no registry serves postgres:16 (scripts/images.sh
# builds it as localhost/svc/postgres:15). Like the official image with POSTGRES_HOST_AUTH_METHOD=trust:
# user postgres, no password, data in /var/lib/postgresql/data, initialised on first start, `postgres …`
# as the command.
ARG DEBIAN_IMAGE=localhost/svc/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql-15 \
  && rm -rf /var/lib/apt/lists/* \
  && install -d -o postgres -g postgres /var/lib/postgresql/data /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/svc-postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432/tcp
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s CMD pg_isready -q -h 127.0.0.1 -p "${PGPORT:-5432}"
ENTRYPOINT ["svc-postgres-entrypoint"]
CMD ["postgres"]
