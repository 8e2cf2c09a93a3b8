#!/bin/sh
# turnserver with the TURN REST shared secret kept off its command line, where every user of the host could
# read it (ps): SVC_TURN_SECRET (the platform's own setting) is written to a 0600 configuration file in a
# private directory and dropped from the environment turnserver gets. printf is a shell builtin, so the
# secret is on no command line on the way either. Other options are arguments, as in the official image;
# without SVC_TURN_SECRET they are turnserver's alone.
set -eu
if [ -z "${SVC_TURN_SECRET:-}" ]; then exec turnserver "$@"; fi
umask 077
config="$(mktemp -d)/turnserver.conf"
printf 'use-auth-secret\nstatic-auth-secret=%s\n' "$SVC_TURN_SECRET" >"$config"
unset SVC_TURN_SECRET
exec turnserver -c "$config" "$@"
