// RetransmissionGate on a clock the test gives: a copy still in the bottleneck's queue is not sent
// again, and retransmissions stay within a quarter of the target rate while a queue builds, within the
// whole of it otherwise.
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

test('while a queue builds, retransmissions share at most a quarter of the target rate over half a second', () => {
  const gate = new RetransmissionGate();
  // 2000 kbit/s: a quarter of it over 500 ms is 31,250 bytes, 26 packets of 1200 (first sent 100 ms
  // before a 40 ms queue: not in flight).
  const verdicts = Array.from({ length: 80 }, () => gate.decide(1200, 900, 1000, 40, 2000));
  assert.equal(verdicts.filter((v) => v === 'send').length, 26);
  assert.equal(gate.refusedOverBudget, 54);
  // Half a second later the budget is back.
  assert.equal(gate.decide(1200, 900, 1500, 40, 2000), 'send');
  // A lower target leaves less room.
  const low = new RetransmissionGate();
  assert.equal(Array.from({ length: 80 }, () => low.decide(1200, 900, 1000, 40, 300)).filter((v) => v === 'send').length, 3);
});

test('without a queue the loss is chance: retransmissions may take the whole target rate, not a keyframe\'s worth less', () => {
  const gate = new RetransmissionGate();
  // 2000 kbit/s over 500 ms is 125,000 bytes: 104 packets of 1200, four times the queued budget.
  const verdicts = Array.from({ length: 120 }, () => gate.decide(1200, 0, 1000, 0, 2000));
  assert.equal(verdicts.filter((v) => v === 'send').length, 104);
  // Once a queue builds (30 ms), what was spent counts against the quarter.
  assert.equal(gate.decide(1200, 0, 1000, 30, 2000), 'over budget');
  assert.equal(gate.decide(1200, 0, 1600, 30, 2000), 'send', 'half a second later');
});

test('on a lossy link a retransmission goes twice, within the same budget', () => {
  const gate = new RetransmissionGate();
  assert.equal(gate.secondCopy(1200, 1000, 0, 2000, 0.005), false, 'not at 0.5 % loss');
  assert.equal(gate.secondCopy(1200, 1000, 0, 2000, 0.05), true, 'at 5 % loss');
  // The queued budget (26 packets at 2000 kbit/s) counts second copies: 25 more first copies fit, then none.
  const verdicts = Array.from({ length: 30 }, () => gate.decide(1200, 900, 1000, 40, 2000));
  assert.equal(verdicts.filter((v) => v === 'send').length, 25);
  assert.equal(gate.secondCopy(1200, 1000, 40, 2000, 0.05), false, 'no second copy over the budget');
  assert.equal(gate.secondCopy(1200, 1000, 0, 2000, 0.05), true, 'without a queue, the whole target rate');
});
