/**
 * `chorus setup cuda`: make ONNX Runtime's CUDA execution provider work for the installed
 * onnxruntime-node (GPU present, provider installed, CUDA libraries found, a session runs on CUDA);
 * exits 1 saying what is missing and where it looked; with --build-engine it then builds the native
 * engine (src/native). --install-only does what needs no GPU (a container image build). `chorus
 * doctor`: what this machine has.
 */
import type { Command } from 'commander';
import { cacheDir, hubOffline, hubUrl } from '../repository/index.ts';
import { modelMemoryLines } from './doctor-model.ts';
import { buildNative } from '../native/build.ts';
import { loadNative } from '../native/index.ts';
import { findCudaLibraries, findGpus, installProvider, onnxRuntimeNode, probeCuda, providerFiles, providerInstalled, type Check } from '../runtime/index.ts';

function print(checks: readonly Check[]): void {
  for (const check of checks) process.stdout.write(`${check.ok ? 'ok     ' : 'MISSING'} ${check.name}: ${check.detail}\n`);
}

export function registerSetup(program: Command): void {
  const setup = program.command('setup').description('set up optional parts of the runtime');
  setup
    .command('cuda')
    .description('install and check ONNX Runtime\'s CUDA execution provider for the installed onnxruntime-node')
    .option('--from <path>', 'the provider package (.tgz) or a folder holding its .so files (default: the npm registry)')
    .option('--build-engine', 'then build the native engine (as npm run build:native): its cache stays on the GPU')
    .option('--install-only', 'install the provider and check the CUDA libraries without a GPU (a container image build); the session on CUDA is not tried')
    .action((options: { from?: string; buildEngine?: boolean; installOnly?: boolean }) => {
      if (options.installOnly) {
        installOnly(options);
        return;
      }
      const gpu = findGpus();
      print([gpu]);
      if (!gpu.ok) {
        process.stdout.write('No GPU, so no CUDA: Chorus runs on the CPU (device: cpu), which needs nothing more.\n');
        process.exitCode = 1;
        return;
      }
      const checks: Check[] = [];
      const installed = providerInstalled();
      checks.push(installed.ok && options.from === undefined ? installed : installProvider(options.from));
      const libraries = findCudaLibraries();
      checks.push(...libraries);
      print(checks);
      const probe = probeCuda();
      print([probe]);
      if (!probe.ok || checks.some((c) => !c.ok && !c.name.startsWith('lib'))) {
        process.stdout.write('CUDA is not usable yet: fix what is MISSING above and run chorus setup cuda again.\n');
        process.exitCode = 1;
        return;
      }
      process.stdout.write('CUDA is ready: models with device: cuda (or cuda:N) run on the GPU.\n');
      if (options.buildEngine) buildEngine();
    });

  program
    .command('doctor')
    .description('print what this machine offers Chorus: versions, devices, the CUDA provider, caches')
    .option('--model <dir>', 'also a built model\'s memory: its weights against the key/value cache')
    .action((options: { model?: string }) => {
      const { version, binDir } = onnxRuntimeNode();
      process.stdout.write(`node ${process.version} on ${process.platform}-${process.arch}\n`);
      process.stdout.write(`onnxruntime-node ${version} (${binDir}: ${providerFiles().join(', ') || 'missing'})\n`);
      print([findGpus(), providerInstalled(), ...findCudaLibraries()]);
      const native = loadNative();
      const detail = native.addon === undefined ? `${native.reason}; the TypeScript engine runs` : `built (${native.addon.cuda ? `cpu, cuda: ${native.addon.cudaDevices()} CUDA device(s) visible` : 'cpu'})`;
      print([{ name: 'native engine', ok: native.addon !== undefined, detail }]);
      process.stdout.write(`cache: ${cacheDir()}\nhub: ${hubUrl()}${hubOffline() ? ' (offline: HF_HUB_OFFLINE)' : ''}\n`);
      if (options.model !== undefined) {
        const gpu = native.addon?.cuda === true && native.addon.cudaDevices() > 0 ? native.addon.gpuMemory(0) : undefined;
        process.stdout.write(modelMemoryLines(options.model, gpu).map((line) => `${line}\n`).join(''));
      }
    });
}

function buildEngine(): void {
  const built = buildNative({ cuda: true, log: (line) => process.stdout.write(`native engine: ${line}\n`) });
  process.stdout.write(`The native engine is built (${built.addon}): generate models on GPUs run on it.\n`);
}

/** `setup cuda --install-only`: what can be done without a GPU (the provider, the libraries, the engine). */
function installOnly(options: { from?: string; buildEngine?: boolean }): void {
  const checks = [installProvider(options.from), ...findCudaLibraries()];
  print(checks);
  if (checks.some((c) => !c.ok)) {
    process.stdout.write('The CUDA provider cannot work here yet: fix what is MISSING above and run chorus setup cuda --install-only again.\n');
    process.exitCode = 1;
    return;
  }
  process.stdout.write('The CUDA provider is installed; on a machine with a GPU, chorus setup cuda (or chorus doctor) checks that a session runs there.\n');
  if (options.buildEngine) buildEngine();
}
