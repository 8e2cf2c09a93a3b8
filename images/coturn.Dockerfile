# coturn from Debian, for docker-compose.yml where no registry serves coturn/coturn (scripts/images.sh
# builds it as localhost/svc/coturn:4.6). The command line is turnserver's, as in the official image.
ARG DEBIAN_IMAGE=localhost/svc/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y coturn \
  && rm -rf /var/lib/apt/lists/*
USER turnserver
EXPOSE 3478/tcp 3478/udp
ENTRYPOINT ["turnserver"]
