// Soak, bounded in count and time, against the real `ctxprobe serve` process (the workload
// is test/soak-load.ts): 200 concurrent clients mixing good, bad, cancelled and
// over-deadline calls over gRPC and HTTP, one large request within the limits and one
// over them. Every good answer equals its solo answer, every status is the one the call
// deserves, health keeps answering SERVING on both ports, and the queued and in-flight
// gauges return to 0. Memory growth and health latency under this load are bounds, not
// correctness: bench/soak.ts measures them (timing bounds made this test fail on busy
// machines).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Served } from './cli-serve.js';
import { pollHealth, soakLoad, soakServer } from './soak-load.js';

let s: Served;
beforeAll(async () => {
  s = await soakServer();
});
afterAll(async () => s?.stop());

describe('soak', () => {
  it('stays correct under 200 mixed clients, and its gauges return to 0', async () => {
    const load = await soakLoad(s);
    const first = await load.round();
    const health = pollHealth(s.healthPort!);
    const mainHealth = pollHealth(s.grpcPort);
    const second = await load.round();
    const [h, mh] = [await health.stop(), await mainHealth.stop()];
    console.log(`soak: ${JSON.stringify({ first, second, health: h, mainHealth: mh })}`);
    for (const r of [first, second]) {
      expect(r.wrong).toEqual([]);
      expect(r.good + r.goodHttp).toBeGreaterThan(200);
      expect(r.bad).toBeGreaterThan(50);
    }
    expect(h.checks).toBeGreaterThan(0);
    expect(h.failed).toBe(0);
    expect(mh.checks).toBeGreaterThan(0);
    expect(mh.failed).toBe(0);
    const metrics = await load.settledMetrics();
    expect(metrics.get('ctxprobe_calls_in_flight')).toBe(0);
    const gauges = [...metrics].filter(([k]) => /^ctxprobe_(queued|in_flight)_items/.test(k));
    expect(gauges.length).toBeGreaterThan(0);
    expect(gauges.filter(([, v]) => v !== 0)).toEqual([]);
  }, 240_000);
});
