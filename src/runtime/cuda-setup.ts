/**
 * Getting ONNX Runtime's CUDA execution provider working for onnxruntime-node, whose npm package ships
 * without it: find the GPU, install the provider libraries built for the installed ONNX Runtime (from
 * the npm registry, or a local package or folder), check that the CUDA libraries they need are found,
 * and prove it by running a session on CUDA in a child process (so a broken install cannot crash the
 * caller). Every check says what it looked for and where.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/** onnxruntime-node version -> the npm package (and version) that ships its CUDA provider, and the folder inside it. */
const PROVIDERS: Record<string, { name: string; version: string; folder: string }> = {
  '1.29.0': { name: 'com.github.asus4.onnxruntime.linux-x64-gpu', version: '0.4.9', folder: 'package/Plugins/Linux/x64' },
};
const PROVIDER_FILES = ['libonnxruntime_providers_cuda.so', 'libonnxruntime_providers_shared.so'];
/** The CUDA 13 user-space libraries the provider links against. */
const CUDA_LIBRARIES = ['libcudart.so.13', 'libcublas.so.13', 'libcublasLt.so.13', 'libcurand.so.10', 'libcufft.so.12', 'libcudnn.so.9'];

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

const require = createRequire(import.meta.url);

/** The installed onnxruntime-node's version and its native binary folder. */
export function onnxRuntimeNode(): { version: string; binDir: string } {
  const packageJson = require.resolve('onnxruntime-node/package.json');
  const version = (JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string }).version;
  return { version, binDir: join(dirname(packageJson), 'bin', 'napi-v6', process.platform, process.arch) };
}

/** Is there an NVIDIA GPU and driver? */
export function findGpus(): Check {
  const looked = ['/proc/driver/nvidia/version', 'nvidia-smi -L'];
  const driver = existsSync('/proc/driver/nvidia/version') ? readFileSync('/proc/driver/nvidia/version', 'utf8').split('\n')[0]!.trim() : undefined;
  let gpus: string[] = [];
  try {
    gpus = execFileSync('nvidia-smi', ['-L'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim().split('\n').filter(Boolean);
  } catch {
    // no nvidia-smi, or no device
  }
  if (gpus.length === 0 && driver === undefined) return { name: 'NVIDIA GPU', ok: false, detail: `no NVIDIA GPU found (looked at ${looked.join(' and ')})` };
  return { name: 'NVIDIA GPU', ok: true, detail: gpus.length > 0 ? gpus.join('; ') : `driver present (${driver}) but nvidia-smi lists no device` };
}

/** Directories the dynamic loader (and the Python CUDA wheels) may hold CUDA libraries in. */
export function libraryDirs(): string[] {
  const dirs = (process.env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean);
  dirs.push('/usr/local/cuda/lib64', '/usr/lib/x86_64-linux-gnu', '/usr/lib64', '/usr/lib');
  return [...new Set(dirs)];
}

/** Each CUDA library the provider needs, and where it was found. */
export function findCudaLibraries(): Check[] {
  const dirs = libraryDirs();
  return CUDA_LIBRARIES.map((library) => {
    const found = dirs.find((dir) => existsSync(join(dir, library)));
    return { name: library, ok: found !== undefined, detail: found !== undefined ? join(found, library) : `not in ${dirs.join(', ')} (set LD_LIBRARY_PATH to the folder that holds it)` };
  });
}

/** Are the provider libraries next to onnxruntime-node's binary? */
export function providerInstalled(): Check {
  const { version, binDir } = onnxRuntimeNode();
  const missing = PROVIDER_FILES.filter((file) => !existsSync(join(binDir, file)));
  return { name: `CUDA provider for onnxruntime-node ${version}`, ok: missing.length === 0, detail: missing.length === 0 ? binDir : `${missing.join(', ')} not in ${binDir}` };
}

/**
 * Installs the provider libraries into onnxruntime-node's binary folder: from `from` (a folder holding
 * them, or the provider package's .tgz), else from the npm registry (`npm pack`).
 */
export function installProvider(from?: string): Check {
  const { version, binDir } = onnxRuntimeNode();
  const provider = PROVIDERS[version];
  if (provider === undefined) return { name: 'install provider', ok: false, detail: `no known CUDA provider package for onnxruntime-node ${version} (known: ${Object.keys(PROVIDERS).join(', ')})` };
  let source: string;
  const work = mkdtempSync(join(tmpdir(), 'chorus-cuda-'));
  try {
    if (from !== undefined && existsSync(from) && statSync(from).isDirectory()) source = from;
    else {
      let tgz = from;
      if (tgz === undefined) {
        const packed = spawnSync('npm', ['pack', '--silent', `${provider.name}@${provider.version}`], { cwd: work, encoding: 'utf8' });
        if (packed.status !== 0) return { name: 'install provider', ok: false, detail: `npm pack ${provider.name}@${provider.version} failed: ${(packed.stderr || packed.error?.message || '').trim()}` };
        tgz = join(work, packed.stdout.trim().split('\n').at(-1)!);
      }
      if (!existsSync(tgz)) return { name: 'install provider', ok: false, detail: `${tgz} does not exist` };
      const untar = spawnSync('tar', ['xzf', tgz, '-C', work], { encoding: 'utf8' });
      if (untar.status !== 0) return { name: 'install provider', ok: false, detail: `cannot unpack ${tgz}: ${untar.stderr.trim()}` };
      source = join(work, provider.folder);
    }
    const missing = PROVIDER_FILES.filter((file) => !existsSync(join(source, file)));
    if (missing.length > 0) return { name: 'install provider', ok: false, detail: `${missing.join(', ')} not in ${source}` };
    for (const file of PROVIDER_FILES) copyFileSync(join(source, file), join(binDir, file));
    return { name: 'install provider', ok: true, detail: `${provider.name}@${provider.version} -> ${binDir}` };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Runs a one-operator model on the CUDA provider in a child process; ok when it ran there. */
export function probeCuda(): Check {
  const work = mkdtempSync(join(tmpdir(), 'chorus-cuda-probe-'));
  try {
    // An ONNX model y = x + x (float32 [2]), as the model builder's GraphBuilder serializes it.
    const model = Buffer.from('CAgSBmNob3J1czIAOl8KFQoBeAoBeBIDQWRkGgNBZGQiA0FkZAoeCgNBZGQSAXkaCnlfaWRlbnRpdHkiCElkZW50aXR5EgRtYWluWg8KAXgSCgoICAESBAoCCAJiDwoBeRIKCggIARIECgIIAkIECgAQEQ==', 'base64');
    const file = join(work, 'probe.onnx');
    writeFileSync(file, model);
    const script = `
      const ort = require(${JSON.stringify(require.resolve('onnxruntime-node'))});
      ort.InferenceSession.create(${JSON.stringify(file)}, { executionProviders: ['cuda'] })
        .then((s) => s.run({ x: new ort.Tensor('float32', Float32Array.from([1, 2]), [2]) }))
        .then((out) => { process.stdout.write('ran on cuda: ' + Array.from(out.y.data).join(',') + '\n'); })
        .catch((e) => { console.error(e.message); process.exit(1); });`;
    const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 120_000 });
    const output = `${child.stdout}${child.stderr}`.trim();
    const ok = child.status === 0 && /ran on cuda: 2,4/.test(output);
    return { name: 'a session on CUDA', ok, detail: ok ? 'x + x computed on the CUDA execution provider' : output.split('\n').slice(-3).join(' ') || `exit ${child.status}` };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Files under onnxruntime-node's binary folder (for doctor). */
export function providerFiles(): string[] {
  const { binDir } = onnxRuntimeNode();
  return existsSync(binDir) ? readdirSync(binDir).sort() : [];
}
