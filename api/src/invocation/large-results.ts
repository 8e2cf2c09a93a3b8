// Results too large to keep in the store (over invocation.maxResultBytes): the reference's large-result path.
// The response of a request answered 202 is zipped as it arrives into the blob store
// (large-results/<requestId>.zip, the response inside as <requestId>.response), and its result becomes 302
// with a signed download URL, valid as long as results are kept. A waiting client is never sent here: it
// gets the response as it streams, whatever its size.
import { PassThrough } from 'node:stream';
import type { PathSigner, SignedQuery } from '../domain/signed-paths.ts';
import { notFound } from '../domain/problem.ts';
import type { BlobStore } from '../store/blobs.ts';
import { problemResult, type BodyWriter, type StoredResult } from './invocation.ts';
import { ZipOfOne } from './zip.ts';

export const largeResultPath = (requestId: string) => `/v2/svc/large-results/${requestId}`;
export const isLargeResultPath = (location: unknown): location is string => typeof location === 'string' && location.startsWith('/v2/svc/large-results/');
const PREFIX = 'large-results';
const keyOf = (requestId: string) => `${PREFIX}/${requestId}.zip`;

export interface LargeResultsOptions {
  blobs: BlobStore;
  signer: PathSigner;
  /** The largest zip kept; a larger response ends 502. */
  maxBytes: number;
  /** How long the download URL works (as long as results are kept). */
  retentionSeconds: number;
}

/** `done(result, abort)`: the result to store; `abort` when the instance must stop sending (the zip failed). */
export type LargeResultDone = (result: StoredResult, abort: boolean) => void;

export class LargeResults {
  readonly #options: LargeResultsOptions;

  constructor(options: LargeResultsOptions) {
    this.#options = options;
  }

  /** Continues a response whose first bytes (`held`) were read already, into the zip of `requestId`. */
  writer(requestId: string, held: Buffer[], done: LargeResultDone): BodyWriter {
    const { blobs, signer, maxBytes, retentionSeconds } = this.#options;
    const zip = new ZipOfOne(`${requestId}.response`);
    const stream = new PassThrough();
    let broken = false;
    // A failed put destroys the stream; its error is the put's rejection, not an unhandled event.
    stream.on('error', () => {});
    stream.write(zip.start());
    for (const chunk of held) stream.write(zip.data(chunk));
    blobs.put(keyOf(requestId), stream, maxBytes).then(() => {
      const location = signer.sign('GET', largeResultPath(requestId), retentionSeconds);
      done({ status: 302, headers: { location, 'content-type': 'application/zip' }, body: Buffer.alloc(0) }, false);
    }, (error: Error) => {
      if (broken) return; // the instance broke off: the plane ends the request 502 itself
      done(problemResult(502, 'bad-gateway', `The response could not be kept as a large result: ${error.message}`), true);
    });
    return {
      data: (chunk) => stream.destroyed || stream.write(zip.data(chunk)),
      end: () => stream.end(zip.end()),
      error: () => {
        broken = true;
        stream.destroy(new Error('the instance broke off'));
      },
      onDrain: (resume) => stream.once('drain', resume),
    };
  }

  async download(requestId: string, query: SignedQuery) {
    this.#options.signer.check('GET', largeResultPath(requestId), query);
    const blob = await this.#options.blobs.get(keyOf(requestId));
    if (!blob) throw notFound(`The large result of request '${requestId}' is gone (results are kept ${this.#options.retentionSeconds} s)`);
    return blob;
  }

  /** Drops zips written before `cutoff` (ms since epoch). */
  sweep(cutoff: number): Promise<void> {
    return this.#options.blobs.sweep(PREFIX, cutoff);
  }
}
