// Container image references: [registry[:port]/]path[:tag][@digest].

export interface ImageReference {
  /** Everything before :tag / @digest, e.g. nvcr.io/org/app. */
  name: string;
  tag?: string;
  digest?: string;
  /** Registry host; docker.io when the reference names none. */
  registry: string;
}

export function parseImageReference(reference: string): ImageReference {
  const [beforeDigest, digest] = reference.split('@', 2);
  const colon = beforeDigest.lastIndexOf(':');
  const hasTag = colon > beforeDigest.lastIndexOf('/');
  const name = hasTag ? beforeDigest.slice(0, colon) : beforeDigest;
  const first = name.split('/')[0];
  // As Docker decides: the first component is a registry if it looks like a host.
  const registry = name.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost') ? first : 'docker.io';
  return { name, tag: hasTag ? beforeDigest.slice(colon + 1) : undefined, digest, registry };
}
