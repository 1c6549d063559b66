/**
 * Time to first token under a wave: WAVE_REQUESTS streamed OpenAI completions sent at once to
 * `chorus serve`'s server over the stand-in engine (bench/serve/server.ts, its own process), WAVE_ROUNDS
 * times; prints each round's TTFT p50 / max and the server's main-thread CPU per request.
 * Usage: node --import tsx bench/serve/wave.ts
 * Knobs: WAVE_REQUESTS=64 WAVE_ROUNDS=5 WAVE_NEW=16 SERVE_STEP_MS=0.9 SERVE_PROFILE=<dir>
 */
import { mainThreadCpu, quantile, sse } from './load.ts';
import { prompts, standInServer } from './stand-in.ts';

const REQUESTS = Number(process.env.WAVE_REQUESTS ?? 64);
const ROUNDS = Number(process.env.WAVE_ROUNDS ?? 5);
const NEW = Number(process.env.WAVE_NEW ?? 16);
const STEP_MS = Number(process.env.SERVE_STEP_MS ?? 0.9);
const texts = prompts();

const { url, server } = await standInServer('serve-wave-', STEP_MS, REQUESTS);
try {
  for (let round = 0; round < ROUNDS; round++) {
    const cpu = mainThreadCpu(server.pid!);
    const traces = await Promise.all(
      Array.from({ length: REQUESTS }, (_, i) =>
        sse(`${url}/v1/completions`, { model: 'stand-in', prompt: texts[(round * REQUESTS + i) % texts.length], max_tokens: NEW, seed: i, stream: true, temperature: 0.7, top_p: 0.9 }, (data) => {
          const chunk = JSON.parse(data) as { choices: Array<{ text?: string }> };
          return { text: chunk.choices[0]?.text ?? '' };
        }),
      ),
    );
    const used = mainThreadCpu(server.pid!) - cpu;
    const ttft = traces.map((t) => t.arrivals[0]! - t.started);
    console.log(`round ${round}: TTFT p50 ${quantile(ttft, 0.5).toFixed(1)} ms, min ${Math.min(...ttft).toFixed(1)}, max ${Math.max(...ttft).toFixed(1)}; server main thread ${((1e3 * used) / REQUESTS).toFixed(2)} ms a request (${NEW} tokens each)`);
  }
} finally {
  server.kill('SIGTERM');
  await new Promise((resolve) => server.once('exit', resolve));
}
