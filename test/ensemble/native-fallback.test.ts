import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { OrtEngine } from '../../src/generation/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { storiesRepository } from '../helpers/server.ts';

// The addon absent (turned off here; a missing or unloadable binary takes the same path): the TypeScript engine serves.
process.env.CHORUS_NATIVE = '0';

describe('without the native addon', () => {
  test('loadNative says why, and a CPU model runs on the TypeScript engine', async () => {
    const { addon, reason } = loadNative();
    assert.equal(addon, undefined);
    assert.match(reason, /CHORUS_NATIVE=0/);
    const service = Service.open(storiesRepository({ stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\n` }), { log: () => {} });
    const model = await service.store.model('stories');
    assert.ok(model.engine === 'generate' && model.generator instanceof OrtEngine);
    const events = await lastValueFrom(model.generator.submit({ inputIds: [1, 403, 407, 300], params: { temperature: 0, request_output_len: 8 } }).pipe(toArray()));
    assert.equal(events.length, 8);
    await model.generator.close();
  });

  test('chorus doctor says the native engine is off and the TypeScript engine runs', () => {
    const doctor = spawnSync(process.execPath, [`${ROOT}bin/chorus.js`, 'doctor'], { encoding: 'utf8', env: { ...process.env, CHORUS_NATIVE: '0' } });
    assert.equal(doctor.status, 0, doctor.stderr);
    assert.match(doctor.stdout, /MISSING native engine: turned off by CHORUS_NATIVE=0; the TypeScript engine runs/);
  });
});
