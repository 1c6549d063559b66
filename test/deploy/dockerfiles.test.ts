/**
 * deploy/docker/*.Dockerfile, checked without a Docker engine: they parse; every path they COPY from
 * the build context exists and is not left out by .dockerignore; every `npm run` script and `chorus`
 * command (with its flags) they run exists; the image serves on the port it exposes, its health check
 * asks a route the server registers, and it runs as the user the Kubernetes manifests expect.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import type { Command } from 'commander';
import { DockerfileParser, type Instruction } from 'dockerfile-ast';
import { buildProgram } from '../../src/cli/main.ts';
import { ROOT } from '../helpers/paths.ts';
import { render } from './objects.ts';
import { getRoutes, OTHER_ENV, serveOptions } from './serve-surface.ts';

const DOCKER = join(ROOT, 'deploy/docker');
const FILES = readdirSync(DOCKER).filter((f) => f.endsWith('.Dockerfile')).sort();
const KEYWORDS = new Set(['FROM', 'ARG', 'RUN', 'COPY', 'ADD', 'ENV', 'WORKDIR', 'VOLUME', 'USER', 'EXPOSE', 'HEALTHCHECK', 'ENTRYPOINT', 'CMD', 'LABEL', 'SHELL', 'STOPSIGNAL']);
const packageJson = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string>; engines: { node: string } };

let hasGet: (path: string) => boolean;
before(async () => {
  hasGet = await getRoutes();
});

function instructions(file: string): Instruction[] {
  return DockerfileParser.parse(readFileSync(join(DOCKER, file), 'utf8')).getInstructions();
}

function flag(instruction: Instruction, name: string): string | undefined {
  const flags = (instruction as Instruction & { getFlags?: () => Array<{ getName(): string; getValue(): string | null }> }).getFlags?.() ?? [];
  return flags.find((f) => f.getName() === name)?.getValue() ?? undefined;
}

/** The last instruction of `keyword` (the one that takes effect). */
function last(list: readonly Instruction[], keyword: string): Instruction {
  const found = list.filter((i) => i.getKeyword() === keyword).at(-1);
  assert.ok(found !== undefined, `no ${keyword}`);
  return found;
}

/** An exec-form instruction's JSON array. */
function execForm(instruction: Instruction): string[] {
  return JSON.parse(instruction.getArgumentsContent()!) as string[];
}

/** The final stage's value of ENV `name`. */
function env(list: readonly Instruction[], name: string): string | undefined {
  let value: string | undefined;
  for (const i of list) {
    if (i.getKeyword() === 'FROM') value = undefined;
    if (i.getKeyword() === 'ENV') for (const a of i.getArguments()) if (a.getValue().startsWith(`${name}=`)) value = a.getValue().slice(name.length + 1);
  }
  return value;
}

/** .dockerignore's patterns as a test of a context path (Docker's matching: *, ?, **, parents). */
function ignored(): (path: string) => boolean {
  const patterns = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
  assert.ok(!patterns.some((p) => p.startsWith('!')), 'exceptions (!) are not modelled here');
  const regexes = patterns.map((p) => new RegExp(`^${p.replace(/^\//, '').replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*\*\//g, '\u0000').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]').replace(/\u0000/g, '(?:.*/)?')}$`));
  return (path) => {
    const parts = path.replace(/\/$/, '').split('/');
    return parts.some((_, n) => regexes.some((r) => r.test(parts.slice(0, n + 1).join('/'))));
  };
}

/** The command `chorus <words>` names, and the flags it was given, or why it does not exist. */
function chorusCommand(words: readonly string[]): { command?: Command; flags: string[]; error?: string } {
  let command: Command = buildProgram();
  const flags: string[] = [];
  for (const word of words) {
    if (word.startsWith('-')) flags.push(word.split('=')[0]!);
    else if (flags.length === 0) {
      const next = command.commands.find((c) => c.name() === word);
      if (next === undefined) return { flags, error: `chorus has no command ${words.join(' ')}` };
      command = next;
    }
  }
  return { command, flags };
}

test('the Dockerfiles parse: known instructions, a FROM first, exec forms that are JSON', () => {
  assert.deepEqual(FILES, ['cpu.Dockerfile', 'cuda.Dockerfile']);
  for (const file of FILES) {
    const list = instructions(file);
    assert.ok(list.length > 10, file);
    for (const i of list) assert.ok(KEYWORDS.has(i.getKeyword()), `${file}: ${i.getKeyword()}`);
    assert.equal(list.find((i) => i.getKeyword() !== 'ARG')!.getKeyword(), 'FROM', file);
    for (const i of list.filter((x) => ['ENTRYPOINT', 'CMD', 'VOLUME'].includes(x.getKeyword()))) assert.ok(Array.isArray(execForm(i)), `${file}: ${i.getKeyword()}`);
  }
});

test('every path COPY takes from the build context exists and is not left out by .dockerignore', () => {
  const isIgnored = ignored();
  assert.ok(isIgnored('node_modules/x') && isIgnored('src/a/node_modules') && isIgnored('build/native') && !isIgnored('src/cli/serve.ts'), 'the matcher can say both');
  for (const file of FILES) {
    const stages = new Set<string>();
    for (const i of instructions(file)) {
      if (i.getKeyword() === 'FROM') {
        const words = i.getArguments().map((a) => a.getValue());
        if (words[1]?.toUpperCase() === 'AS') stages.add(words[2]!);
      }
      if (i.getKeyword() !== 'COPY') continue;
      const from = flag(i, 'from');
      if (from !== undefined) {
        assert.ok(stages.has(from), `${file}: COPY --from=${from} names no earlier stage`);
        continue;
      }
      for (const source of i.getArguments().slice(0, -1).map((a) => a.getValue())) {
        assert.ok(existsSync(join(ROOT, source)), `${file}: COPY ${source}: no such path`);
        assert.ok(!isIgnored(source), `${file}: COPY ${source}: left out of the context by .dockerignore`);
      }
    }
  }
});

test('every command the images run exists: npm scripts, chorus commands and their flags, and the entrypoint', () => {
  for (const file of FILES) {
    const list = instructions(file);
    const copied: string[] = [];
    let chorusRuns = 0;
    for (const i of list) {
      if (i.getKeyword() === 'COPY' && flag(i, 'from') === undefined) copied.push(...i.getArguments().slice(0, -1).map((a) => a.getValue()));
      if (i.getKeyword() !== 'RUN') continue;
      for (const step of i.getArgumentsContent()!.split('&&').map((s) => s.trim().split(/\s+/))) {
        if (step[0] === 'npm' && step[1] === 'ci') assert.ok(copied.includes('package-lock.json'), `${file}: npm ci before the lockfile is copied`);
        if (step[0] === 'npm' && step[1] === 'run') {
          const script = packageJson.scripts[step[2]!];
          assert.ok(script !== undefined, `${file}: npm run ${step[2]}: no such script`);
          const target = /tsx (\S+\.ts)/.exec(script)?.[1];
          for (const arg of step.slice(4)) assert.ok(target !== undefined && readFileSync(join(ROOT, target), 'utf8').includes(`'${arg}'`), `${file}: npm run ${step[2]} -- ${arg}: ${target} reads no ${arg}`);
        }
        if (step[0] === 'node' && step[1] === 'bin/chorus.js') {
          chorusRuns++;
          const { command, flags, error } = chorusCommand(step.slice(2));
          assert.equal(error, undefined, file);
          for (const f of flags) assert.ok(command!.options.some((o) => o.long === f), `${file}: chorus ${step.slice(2).join(' ')}: no flag ${f}`);
        }
      }
    }
    if (file.startsWith('cuda')) assert.equal(chorusRuns, 1, `${file}: chorus setup cuda installs the provider`);
    const entrypoint = execForm(last(list, 'ENTRYPOINT'));
    const cmd = execForm(last(list, 'CMD'));
    assert.deepEqual(entrypoint, ['node', 'bin/chorus.js'], file);
    assert.equal(chorusCommand(cmd).command?.name(), 'serve', file);
  }
  assert.equal(chorusCommand(['setup', 'cuda', '--no-such-flag']).command!.options.some((o) => o.long === '--no-such-flag'), false, 'the flag check can fail');
  assert.match(chorusCommand(['sevre']).error!, /no command sevre/);
});

test('the images serve on the port they expose, check health on a registered route, keep the cache on a volume, run as 10001', () => {
  const variables = new Set([...serveOptions().map((o) => o.envVar), ...OTHER_ENV, 'CHORUS_REPOSITORY']);
  const pods = render('deploy/kubernetes/overlays/cpu').filter((o) => o.kind === 'Deployment');
  const runAsUser = (pods[0]!.spec as { template: { spec: { securityContext: { runAsUser: number } } } }).template.spec.securityContext.runAsUser;
  for (const file of FILES) {
    const list = instructions(file);
    const port = env(list, 'CHORUS_PORT');
    assert.equal(last(list, 'EXPOSE').getArguments()[0]!.getValue(), port, file);
    assert.equal(env(list, 'CHORUS_HOST'), '0.0.0.0', file);
    for (const i of list.filter((x) => x.getKeyword() === 'ENV')) {
      for (const a of i.getArguments()) {
        const name = a.getValue().split('=')[0]!;
        if (name.startsWith('CHORUS_')) assert.ok(variables.has(name), `${file}: ENV ${name} is read by nothing`);
      }
    }
    const health = list.find((i) => i.getKeyword() === 'HEALTHCHECK')!.getArgumentsContent()!;
    const path = /\$\{process\.env\.CHORUS_PORT\}(\/[\w/]+)/.exec(health)?.[1];
    assert.ok(path !== undefined && hasGet(path), `${file}: the health check asks ${path}`);
    const volume = execForm(list.find((i) => i.getKeyword() === 'VOLUME')!);
    assert.deepEqual(volume, [env(list, 'CHORUS_CACHE')], `${file}: the model cache is the volume`);
    assert.equal(Number(last(list, 'USER').getArguments()[0]!.getValue()), runAsUser, file);
  }
});

test('the base images: Node LTS at or past the engines field, CUDA 13 with cuDNN, built on devel and run on runtime', () => {
  const least = Number(/(\d+)/.exec(packageJson.engines.node)![1]);
  for (const file of FILES) {
    const args = new Map(DockerfileParser.parse(readFileSync(join(DOCKER, file), 'utf8')).getARGs().map((a) => [a.getProperty()!.getName(), a.getProperty()!.getValue()]));
    const node = Number(args.get('NODE_VERSION'));
    assert.ok(node >= least && node >= 22 && node % 2 === 0, `${file}: Node ${node} is an LTS line at or past ${least}`);
  }
  const cuda = DockerfileParser.parse(readFileSync(join(DOCKER, 'cuda.Dockerfile'), 'utf8'));
  assert.match(cuda.getARGs().find((a) => a.getProperty()!.getName() === 'CUDA_VERSION')!.getProperty()!.getValue()!, /^13\./);
  const tags = cuda.getFROMs().filter((f) => f.getImageName() === 'nvidia/cuda').map((f) => f.getImageTag());
  assert.deepEqual(tags, ['${CUDA_VERSION}-cudnn-devel-${UBUNTU}', '${CUDA_VERSION}-cudnn-runtime-${UBUNTU}']);
});
