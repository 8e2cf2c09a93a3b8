// People arriving and leaving, through the whole path (Chromium → proxy → platform → container), for
// bench/stream: how long the next person waits after a tab closes, and how ten arrivals at once are served.
// Times are wall-clock milliseconds on this machine: the bench's Date.now() for its own actions, and the
// page's performance.timeOrigin + timestamps for what happened in the page.
import type { Page } from 'playwright-core';
import { FAST_AUTOSCALER } from '../../api/test/helpers/autoscaler-platform.ts';
import { until } from '../../api/test/helpers/wait.ts';
import { goto, startStreamingStack, waitForFreeInstance, waitForSnapshot, type StreamingStack } from '../../test/helpers/streaming-stack.ts';

const VIDEO = '1280x720';

/** Resolves (in the page) with the wall-clock time the first frame of the stream was due on screen. */
const FIRST_FRAME = `void (window.firstFrameAt = new Promise((resolve) => document.getElementById('video')
  .requestVideoFrameCallback((_now, frame) => resolve(performance.timeOrigin + frame.expectedDisplayTime))))`;
const firstFrameAt = (page: Page) => page.evaluate('window.firstFrameAt') as Promise<number>;
const grantedAt = (page: Page) => page.evaluate('performance.timeOrigin + svcStream.client.timeline.reserved') as Promise<number>;

async function openPage(stack: StreamingStack): Promise<Page> {
  const page = await stack.context.newPage();
  await goto(page, stack.pageUrl());
  await page.evaluate(FIRST_FRAME);
  await page.click('#action');
  return page;
}

/** Milestones of a hand-over in the platform's log, as ms after `since` (undefined if not logged). */
function milestones(stack: StreamingStack, since: number): Record<'ended' | 'processStarted' | 'running', number | undefined> {
  const entries = stack.svc.logs.map((line) => JSON.parse(line) as { msg: string; time: number }).filter((entry) => entry.time >= since);
  const at = (msg: string) => {
    const entry = entries.find((candidate) => candidate.msg === msg);
    return entry && entry.time - since;
  };
  return { ended: at('streaming session ended'), processStarted: at('instance process started'), running: at('instance RUNNING') };
}

/**
 * A streams on a one-instance function, B waits in line, A closes the tab. Per sample: from the close to
 * B's grant (the instance freed by A's leaving, ready for B) and to B's first frame, and where the time
 * went: the session's end (the closing page's sign-out), the replacement's process started, and its first
 * healthy check (RUNNING).
 */
export async function nextPersonAfterTabClose(samples: number) {
  const stack = await startStreamingStack({ name: 'bench-next', video: VIDEO, config: { log: { level: 'info' } } });
  const grantMs: number[] = [];
  const frameMs: number[] = [];
  const steps: ReturnType<typeof milestones>[] = [];
  try {
    for (let sample = 0; sample < samples; sample++) {
      await waitForFreeInstance(stack);
      const a = await openPage(stack);
      await waitForSnapshot(a, 'A streaming', (s) => s.framesDecodedFromBarcode >= 10, 60_000);
      const b = await openPage(stack);
      await waitForSnapshot(b, 'B in line', (s) => s.state === 'waiting', 30_000);
      const closedAt = Date.now();
      await a.close({ runBeforeUnload: true });
      await waitForSnapshot(b, 'B streaming', (s) => s.framesDecodedFromBarcode >= 1, 60_000);
      grantMs.push(await grantedAt(b) - closedAt);
      frameMs.push(await firstFrameAt(b) - closedAt);
      steps.push(milestones(stack, closedAt));
      await b.close({ runBeforeUnload: true });
    }
  } finally {
    await stack.close();
  }
  return { grantMs, frameMs, steps };
}

/**
 * Ten people press Start within a second at a function of at most two instances with `spare: 1`; each
 * streams for `streamMs` and closes the tab. Per person: from pressing Start to the first frame.
 */
export async function tenArrivals(runs: number, streamMs = 2000): Promise<{ firstFrameMs: number[]; inOrder: boolean }> {
  const stack = await startStreamingStack({
    name: 'bench-ten', video: VIDEO, config: { log: { level: 'info' }, autoscaler: FAST_AUTOSCALER },
    spec: { minInstances: 1, maxInstances: 2, autoscalingConfiguration: { spare: 1 } },
  });
  const firstFrameMs: number[] = [];
  let inOrder = true;
  try {
    for (let run = 0; run < runs; run++) {
      await waitForFreeInstance(stack);
      const people: { page: Page; startedAt: number }[] = [];
      for (let person = 0; person < 10; person++) {
        const startedAt = Date.now();
        people.push({ page: await openPage(stack), startedAt });
        await until(`person ${person} signed in`, () => people[person].page.evaluate('svcStream.client?.sessionId') as Promise<string | undefined>);
      }
      const order = await Promise.all(people.map((person) => person.page.evaluate('svcStream.client.sessionId') as Promise<string>));
      await Promise.all(people.map(async ({ page, startedAt }, person) => {
        await waitForSnapshot(page, `person ${person} streaming`, (s) => s.framesDecodedFromBarcode >= 1, 300_000);
        firstFrameMs.push(await firstFrameAt(page) - startedAt);
        await new Promise((resolve) => setTimeout(resolve, streamMs));
        await page.close({ runBeforeUnload: true });
      }));
      const granted = stack.svc.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'streaming session granted' && order.includes(entry.sessionId));
      inOrder &&= granted.map((entry) => entry.sessionId).join() === order.join();
    }
  } finally {
    await stack.close();
  }
  return { firstFrameMs, inOrder };
}
