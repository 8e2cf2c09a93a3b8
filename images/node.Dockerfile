# Node.js 24 on the local Debian base (scripts/images.sh): the runtime base of every project image. The
# context holds `node`, the binary of the npm package `node`. User node (1000:1000) as in the official
# node images, so the project's Dockerfiles also build FROM node:24-bookworm-slim elsewhere.
ARG DEBIAN_IMAGE=localhost/svc/debian:bookworm
FROM ${DEBIAN_IMAGE}
COPY node /usr/local/bin/node
RUN groupadd --gid 1000 node \
  && useradd --uid 1000 --gid node --create-home --shell /bin/bash node \
  && node --version
