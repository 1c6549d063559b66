/**
 * Several engines of one model (instance_group: several sessions, on several GPUs) behind one Engine:
 * each request goes to the instance with the fewest requests running and waiting (the first among
 * equals), and stays there.
 */
import { defer, type Observable } from 'rxjs';
import type { Engine, EngineStats, GenerateRequest, TokenEvent } from '../core/engine.ts';

export class EnginePool implements Engine {
  constructor(readonly instances: readonly Engine[]) {
    if (instances.length === 0) throw new RangeError('an engine pool needs at least one engine');
  }

  submit(request: GenerateRequest): Observable<TokenEvent> {
    return defer(() => {
      let best = this.instances[0]!;
      let load = Infinity;
      for (const engine of this.instances) {
        const stats = engine.stats();
        const current = stats.running + stats.waiting;
        if (current < load) {
          best = engine;
          load = current;
        }
      }
      return best.submit(request);
    });
  }

  stats(): EngineStats {
    const all = this.instances.map((e) => e.stats());
    const sum = (key: keyof EngineStats): number => all.reduce((total, s) => total + s[key], 0);
    const keys = Object.keys(all[0]!) as Array<keyof EngineStats>;
    return Object.fromEntries(keys.map((key) => [key, sum(key)])) as unknown as EngineStats;
  }

  async close(): Promise<void> {
    await Promise.all(this.instances.map((e) => e.close()));
  }
}
