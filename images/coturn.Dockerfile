# coturn from Debian, for docker-compose.yml and deploy/kubernetes where no registry serves coturn/coturn
# (scripts/images.sh builds it as localhost/svc/coturn:4.6). Arguments are turnserver's, as in the official
# image; the shared secret comes from SVC_TURN_SECRET into a 0600 file, never a command line
# (coturn-entrypoint.sh).
ARG DEBIAN_IMAGE=localhost/svc/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y coturn \
  && rm -rf /var/lib/apt/lists/*
COPY --chmod=755 coturn-entrypoint.sh /usr/local/bin/coturn-entrypoint
USER turnserver
EXPOSE 3478/tcp 3478/udp
ENTRYPOINT ["/usr/local/bin/coturn-entrypoint"]
