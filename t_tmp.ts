import { makeCheckpoint, buildModel } from './src/modelbuild/index.ts';
import { DecoderSession } from './src/runtime/index.ts';
makeCheckpoint({ arch: 'qwen2', size: 'tiny', seed: 1, out: '/tmp/h-ck' });
buildModel({ source: '/tmp/h-ck', out: '/tmp/h-32' });
buildModel({ source: '/tmp/h-ck', out: '/tmp/h-16', dtype: 'fp16' });
const a = await DecoderSession.open('/tmp/h-32');
const prompt = [5, 17, 99, 200, 3, 42];
const ra = await a.run({ inputIds: [prompt] });
try {
  const b = await DecoderSession.open('/tmp/h-16');
  const rb = await b.run({ inputIds: [[0, ...prompt]], attentionMask: [[0, 1, 1, 1, 1, 1, 1]] });
  let m = 0; for (let i = 0; i < ra.logits.length; i++) m = Math.max(m, Math.abs(ra.logits[i]! - rb.logits[i + 512]!));
  console.log('fp16 vs fp32 max diff', m, 'nan?', rb.logits.some(Number.isNaN));
} catch (e) { console.log('fp16 on CPU:', (e as Error).message.slice(0, 300)); }
