# The build stage's base: Node.js 24 and npm (this machine's npm, copied by scripts/images.sh). Only
# multi-stage builds use it; no final image carries npm.
ARG NODE_IMAGE=localhost/svc/node:24
FROM ${NODE_IMAGE}
COPY npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm && npm --version
