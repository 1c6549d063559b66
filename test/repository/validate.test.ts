import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { formatDiagnostic, type Diagnostic } from '../../src/config/index.ts';
import { bundledRepositoryDir, loadRepository } from '../../src/repository/index.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

// Hub sources are looked up in the cache; an empty one makes "not in the cache" the same everywhere.
process.env.CHORUS_CACHE = scratchDir('chorus-cache-');

const FIXTURES = join(ROOT, 'test/fixtures/repositories');

interface Expectation {
  file: string;
  line: number;
  severity: 'error' | 'warning';
  text: string;
}

/** The `# expect: <text>` and `# expect-warning: <text>` markers planted in a fixture repository. */
function expectations(dir: string): Expectation[] {
  const found: Expectation[] = [];
  for (const folder of readdirSync(dir)) {
    for (const name of readdirSync(join(dir, folder))) {
      const file = join(dir, folder, name);
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((text, index) => {
          const marker = /# expect(-warning)?: (.*)$/.exec(text);
          if (marker) found.push({ file: relative(process.cwd(), file), line: index + 1, severity: marker[1] ? 'warning' : 'error', text: marker[2]! });
        });
    }
  }
  return found;
}

test('validate reports each planted mistake at its line, and nothing else', () => {
  const dir = join(FIXTURES, 'broken');
  const { diagnostics } = loadRepository(dir);
  const expected = expectations(dir);
  assert.ok(expected.filter((e) => e.severity === 'error').length >= 6, 'the fixture plants at least 6 mistakes');
  const unmatched = [...diagnostics];
  for (const expectation of expected) {
    const index = unmatched.findIndex(
      (d) => d.file === expectation.file && d.line === expectation.line && d.severity === expectation.severity && d.message.includes(expectation.text),
    );
    assert.ok(index >= 0, `expected at ${expectation.file}:${expectation.line}: ${expectation.severity}: ${expectation.text}\ngot:\n${diagnostics.map(formatDiagnostic).join('\n')}`);
    unmatched.splice(index, 1);
  }
  assert.deepEqual(unmatched.map(formatDiagnostic), []);
});

test('validate gives the column of the offending value, or of the key for unknown fields', () => {
  const { diagnostics } = loadRepository(join(FIXTURES, 'broken'));
  const find = (text: string): Diagnostic => diagnostics.find((d) => d.message.includes(text))!;
  assert.deepEqual([find('unknown field "encodng"').line, find('unknown field "encodng"').column], [2, 1]);
  assert.deepEqual([find('type must be one of').line, find('type must be one of').column], [1, 7]);
  assert.deepEqual([find('unknown tensor _lenghts').line, find('unknown tensor _lenghts').column], [16, 47]);
});

test('a valid repository has no diagnostics', () => {
  const { repository, diagnostics } = loadRepository(join(FIXTURES, 'valid'));
  assert.deepEqual(diagnostics.map(formatDiagnostic), []);
  assert.deepEqual([...repository.tokenizers.keys()], ['gpt2', 'stories', 't5']);
  assert.deepEqual(repository.ensembles.get('gpt')?.value.steps.map((s) => s.name), ['postprocessing', 'preprocessing', 'generate']);
});

test('the bundled repository has no errors; sources not in the cache are warnings', () => {
  const { repository, diagnostics } = loadRepository(bundledRepositoryDir());
  assert.deepEqual([...repository.tokenizers.keys()], ['bart', 'gemma2', 'gpt2', 'llama2', 'llama3', 'mistral', 'phi3', 'qwen3', 'stories-tokenizer', 't5']);
  assert.deepEqual([...repository.pipelines.keys()], ['bart', 'gemma2', 'gpt', 'gpt2', 'llama3', 'mistral', 'phi3', 'qwen3', 'stories', 't5']);
  assert.deepEqual(diagnostics.filter((d) => d.severity === 'error'), []);
  assert.deepEqual(
    diagnostics.map((d) => [d.file.replace(/^.*\/(tokenizers|models)\//, '$1/'), d.severity]),
    [
      ['models/bart-large-cnn.yaml', 'warning'],
      ['models/gemma-2-2b.yaml', 'warning'],
      ['models/gpt2.yaml', 'warning'],
      ['models/llama-3.2-1b.yaml', 'warning'],
      ['models/mistral-7b.yaml', 'warning'],
      ['models/phi-3-mini.yaml', 'warning'],
      ['models/qwen3-1.7b.yaml', 'warning'],
      ['models/stories.yaml', 'warning'],
      ['models/t5-encoder.yaml', 'warning'],
      ['models/t5-small.yaml', 'warning'],
      ['tokenizers/bart.yaml', 'warning'],
      ['tokenizers/gemma2.yaml', 'warning'],
      ['tokenizers/llama2.yaml', 'warning'],
      ['tokenizers/llama3.yaml', 'warning'],
      ['tokenizers/mistral.yaml', 'warning'],
      ['tokenizers/phi3.yaml', 'warning'],
      ['tokenizers/qwen3.yaml', 'warning'],
    ],
  );
});

test('a directory without definitions is an error, not an empty success', () => {
  const empty = scratchDir('chorus-empty-');
  const { diagnostics } = loadRepository(empty);
  assert.equal(diagnostics.length, 1);
  assert.match(diagnostics[0]!.message, /no definitions found: expected YAML files under tokenizers\/, models\/, ensembles\/, pipelines\//);
  assert.match(loadRepository(join(empty, 'nope')).diagnostics[0]!.message, /repository directory does not exist/);
});

test('end_ids applies to engine generate: on another engine it is an error at its key', () => {
  const dir = scratchDir('chorus-end-ids-repo-');
  mkdirSync(join(dir, 'models'));
  writeFileSync(join(dir, 'models', 'encoder.yaml'), 'engine: encode\nsource: ./nowhere\nend_ids: [1, 2]\n');
  writeFileSync(join(dir, 'models', 'generator.yaml'), 'engine: generate\nsource: ./nowhere\nend_ids: [1, 2]\n');
  const found = loadRepository(dir).diagnostics.filter((d) => d.message.includes('end_ids'));
  assert.deepEqual(found.map((d) => [relative(dir, d.file), d.line, d.message]), [['models/encoder.yaml', 3, 'end_ids applies to engine generate, not encode']]);
});

test('a checkpoint whose config.json a build would refuse is said at validate, as a warning: the rest of the repository still serves', () => {
  const dir = scratchDir('chorus-validate-config-');
  mkdirSync(join(dir, 'models'));
  const checkpoint = (name: string, config: string): void => {
    mkdirSync(join(dir, name));
    writeFileSync(join(dir, name, 'config.json'), config);
    writeFileSync(join(dir, 'models', `${name}.yaml`), `engine: generate\nsource: ./${name}\n`);
  };
  checkpoint('truncated', '{"model_type": "llama",');
  checkpoint('yarn', JSON.stringify({ model_type: 'llama', hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 100, rope_scaling: { rope_type: 'yarn', factor: 4 } }));
  checkpoint('unknown', JSON.stringify({ model_type: 'mamba' }));
  const { diagnostics } = loadRepository(dir);
  const said = (name: string): string => diagnostics.find((d) => d.file.endsWith(`${name}.yaml`) && d.message.includes('config.json'))?.message ?? '(none)';
  assert.match(said('truncated'), /^loading it will fail: \/.*truncated\/config\.json is not valid JSON: /);
  assert.match(said('yarn'), /^loading it will fail: \/.*yarn\/config\.json: rope_scaling of type "yarn" is not supported/);
  assert.match(said('unknown'), /^loading it will fail: \/.*unknown\/config\.json: .*mamba/);
  assert.ok(diagnostics.filter((d) => d.message.includes('config.json')).every((d) => d.severity === 'warning'));
});

test('a script step must name a file inside the repository', () => {
  const dir = scratchDir('chorus-validate-script-');
  mkdirSync(join(dir, 'ensembles'));
  const ensemble = (name: string, script: string): void =>
    writeFileSync(
      join(dir, 'ensembles', `${name}.yaml`),
      `inputs:\n  x: { datatype: FP32, dims: [-1] }\noutputs:\n  y: { datatype: FP32, dims: [-1] }\nsteps:\n  - name: s\n    script: ${script}\n    inputs: { x: x }\n    outputs: { y: y }\n`,
    );
  ensemble('absolute', '/etc/passwd');
  ensemble('outside', '../elsewhere/step.ts');
  const { diagnostics } = loadRepository(dir);
  const said = (name: string): string[] => diagnostics.filter((d) => d.file.endsWith(`${name}.yaml`)).map((d) => `${d.line}: ${d.message}`);
  assert.deepEqual(said('absolute'), ['7: script must be a path inside the repository, relative to it; got /etc/passwd']);
  assert.deepEqual(said('outside'), ['7: script must be a path inside the repository, relative to it; got ../elsewhere/step.ts']);
  assert.ok(diagnostics.every((d) => d.severity === 'error'), 'errors: a repository with them is not served');
});
