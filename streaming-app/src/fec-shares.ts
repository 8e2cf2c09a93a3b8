// Which lost video packets the receiver will rebuild from FEC without a retransmission. Each FEC packet
// protects a share of a frame's media packets (flexfec.ts) and rebuilds one lost packet of it, when
// itself arrives. The losses come to the sender in NACKs and in the transport-wide feedback, which also
// says whether each FEC packet arrived. A NACK leaves the receiver the moment it sees a gap, before the
// frame's FEC packets have come, so the first copy still goes (holding it until the FEC packet's fate is
// known would cost a feedback interval, 50-100 ms, on every FEC packet lost); what is left out is only
// what the FEC packet makes redundant: the second copy of a retransmission, and the resend of a loss
// that no NACK asked for once its share's FEC packet is known to have arrived. A second copy left out is
// owed again when the share turns out not to rebuild it (another loss in it, its FEC packet lost): a
// share's members are spread over the whole frame, so a loss among them is often reported after the
// first, and a lone copy lost at 100 ms of round trip waits another round trip, a freeze.

export type FecShare = { lost: Set<number>; fec: 'pending' | 'received' | 'lost'; owed: Set<number> };

export class FecShares {
  /** Each protected media packet's share, by RTP sequence number. */
  readonly #byMedia = new Map<number, FecShare>();
  /** Each FEC packet's share, by its transport-wide sequence number (until the feedback on it; one whose feedback was lost is overwritten when the number comes round). */
  readonly #byFec = new Map<number, FecShare>();

  /** One FEC packet's share, by the RTP sequence numbers of the media packets it protects (before they leave). */
  add(members: number[]): FecShare {
    const share: FecShare = { lost: new Set(), fec: 'pending', owed: new Set() };
    for (const seq of members) this.#byMedia.set(seq, share);
    return share;
  }

  /** The share's FEC packet left with this transport-wide sequence number. */
  fecSent(share: FecShare, transportSeq: number): void {
    this.#byFec.set(transportSeq, share);
  }

  /**
   * What the transport-wide feedback says of a packet: undefined when it is no FEC packet; otherwise the
   * second copies owed now that its share will not rebuild them (it was lost).
   */
  fecReported(transportSeq: number, received: boolean): number[] | undefined {
    const share = this.#byFec.get(transportSeq);
    if (!share) return undefined;
    this.#byFec.delete(transportSeq);
    share.fec = received ? 'received' : 'lost';
    return received ? [] : this.#settle(share);
  }

  /** A media packet reported lost, by a NACK or the feedback; returns the second copies owed now that its share rebuilds neither. */
  lost(seq: number): number[] {
    const share = this.#byMedia.get(seq);
    if (!share || share.lost.has(seq)) return [];
    share.lost.add(seq);
    return share.lost.size > 1 ? this.#settle(share) : [];
  }

  /**
   * Whether the receiver rebuilds `seq` from FEC: the only loss known in its share, whose FEC packet is
   * not known lost (`arrived`: and known to have arrived).
   */
  rebuilds(seq: number, arrived = false): boolean {
    const share = this.#byMedia.get(seq);
    if (!share || share.fec === 'lost' || (arrived && share.fec !== 'received')) return false;
    return share.lost.size === 1 && share.lost.has(seq);
  }

  /** The second copy of `seq` is left to FEC: owed again if its share turns out not to rebuild it. */
  leftOut(seq: number): void {
    this.#byMedia.get(seq)?.owed.add(seq);
  }

  /** A media packet is out of the retransmission history: nothing about it matters any more. */
  forget(seq: number): void {
    this.#byMedia.delete(seq);
  }

  #settle(share: FecShare): number[] {
    const owed = [...share.owed];
    share.owed.clear();
    return owed;
  }
}
