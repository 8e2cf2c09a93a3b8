# Node.js 24 with what a streaming container captures and encodes: ffmpeg (libx264, libvpx, h264_nvenc at
# run time), an X server without a screen (Xvfb), PulseAudio and xterm as a small demo application (input
# goes into X11 through XTEST from the app's own X connection: no tool for it). From Debian's mirror, once (podman keeps the layer).
ARG NODE_IMAGE=localhost/svc/node:24
FROM ${NODE_IMAGE}
RUN apt-get update \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y ffmpeg xvfb pulseaudio xterm xfonts-base \
  && rm -rf /var/lib/apt/lists/*
