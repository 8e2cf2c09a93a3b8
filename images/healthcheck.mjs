// HEALTHCHECK of the project's images: exit 0 when the URL answers 2xx (http, or https without verifying
// the certificate: it only ever asks its own container over loopback), or when a tcp://host:port accepts
// a connection; exit 1 otherwise. Plain JavaScript, node:* only, so any Node.js runs it.
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';

const target = new URL(process.argv[2] ?? '');
const fail = () => process.exit(1);
setTimeout(fail, 3000).unref();
if (target.protocol === 'tcp:') {
  net.connect(Number(target.port), target.hostname, () => process.exit(0)).on('error', fail);
} else {
  const client = target.protocol === 'https:' ? https : http;
  client.get(target, { rejectUnauthorized: false }, (response) => {
    process.exit(response.statusCode >= 200 && response.statusCode < 300 ? 0 : 1);
  }).on('error', fail);
}
