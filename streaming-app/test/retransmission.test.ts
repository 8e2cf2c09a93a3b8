// RetransmissionGate on a clock the test gives: a copy still in the bottleneck's queue is not sent
// again, and retransmissions stay within a quarter of the target rate.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RetransmissionGate } from '../src/retransmission.ts';

test('a packet does not go again while its last copy may still wait in a queue; without one, every request is answered', () => {
  const gate = new RetransmissionGate();
  // A 200 ms queue at the bottleneck: a copy sent 150 ms ago is still in it.
  assert.equal(gate.decide(1200, 1000, 1150, 200, 2000), 'in flight');
  assert.equal(gate.decide(1200, 1000, 1201, 200, 2000), 'send');
  // 10 ms of delay is jitter, not a queue: a receiver's second request for a packet means the copy was lost.
  assert.equal(gate.decide(1200, 1000, 1005, 10, 2000), 'send');
  assert.equal(gate.refusedInFlight, 1);
});

test('retransmissions share at most a quarter of the target rate over half a second', () => {
  const gate = new RetransmissionGate();
  // 2000 kbit/s: a quarter of it over 500 ms is 31,250 bytes, 26 packets of 1200.
  const verdicts = Array.from({ length: 80 }, () => gate.decide(1200, 0, 1000, 0, 2000));
  assert.equal(verdicts.filter((v) => v === 'send').length, 26);
  assert.equal(gate.refusedOverBudget, 54);
  // Half a second later the budget is back.
  assert.equal(gate.decide(1200, 0, 1500, 0, 2000), 'send');
  // A lower target leaves less room.
  const low = new RetransmissionGate();
  assert.equal(Array.from({ length: 80 }, () => low.decide(1200, 0, 1000, 0, 300)).filter((v) => v === 'send').length, 3);
});

test('on a lossy link a retransmission goes twice, within the same budget', () => {
  const gate = new RetransmissionGate();
  assert.equal(gate.secondCopy(1200, 1000, 2000, 0.005), false, 'not at 0.5 % loss');
  assert.equal(gate.secondCopy(1200, 1000, 2000, 0.05), true, 'at 5 % loss');
  // The budget (26 packets at 2000 kbit/s) counts second copies: 25 more first copies fit, then none.
  const verdicts = Array.from({ length: 30 }, () => gate.decide(1200, 0, 1000, 0, 2000));
  assert.equal(verdicts.filter((v) => v === 'send').length, 25);
  assert.equal(gate.secondCopy(1200, 1000, 2000, 0.05), false, 'no second copy over the budget');
});
