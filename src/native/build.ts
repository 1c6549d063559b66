/**
 * Builds the native engine's addon (`npm install` for the CPU, `npm run build:native`, `chorus setup
 * cuda --build-engine`): CMake over src/native with ONNX Runtime 1.29's C/C++ API headers kept in
 * src/native/ort-include, against onnxruntime-node's own libonnxruntime.so.1, with the CUDA kernels
 * when asked (sm_80, sm_90). The result is build/native/chorus_native.node, and beside it build.json:
 * what it was built from, so that an install rebuilds only what changed.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ChorusError } from '../errors.ts';

/** The C API version the kept headers and onnxruntime-node 1.29's library share. */
export const ORT_API_VERSION = 29;

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
/** Where the build goes; the addon itself is `NATIVE_ADDON`. */
export const NATIVE_BUILD_DIR = join(ROOT, 'build', 'native');
export const NATIVE_ADDON = join(NATIVE_BUILD_DIR, 'chorus_native.node');
/** What the addon was built from ({ cuda, sources }), written after a build. */
export const NATIVE_STAMP = join(NATIVE_BUILD_DIR, 'build.json');
const SOURCE_DIR = join(ROOT, 'src', 'native');
const ORT_INCLUDE = join(SOURCE_DIR, 'ort-include');

export interface NativeBuildOptions {
  /** Build the CUDA kernels: true, false, or 'auto' (when nvcc is found). Default: auto. */
  cuda?: boolean | 'auto';
  /** Lines of progress. */
  log?: (line: string) => void;
}

export interface NativeBuildResult {
  addon: string;
  cuda: boolean;
}

/** Builds build/native/chorus_native.node. */
export function buildNative(options: NativeBuildOptions = {}): NativeBuildResult {
  const log = options.log ?? (() => undefined);
  const require = createRequire(import.meta.url);
  requireTool('cmake', ['--version'], 'cmake (apt-get install cmake)');
  requireTool('c++', ['--version'], 'a C++17 compiler (apt-get install g++)');
  const nvcc = findNvcc();
  const cuda = options.cuda === 'auto' || options.cuda === undefined ? nvcc !== undefined : options.cuda;
  if (cuda && nvcc === undefined) throw new ChorusError('CHORUS_UNSUPPORTED', 'the CUDA kernels need nvcc: none on PATH or in /usr/local/cuda/bin', { param: 'cuda' });

  const ortLibraryDir = join(dirname(require.resolve('onnxruntime-node/package.json')), 'bin', 'napi-v6', `${process.platform}`, `${process.arch}`);
  const ortLibrary = join(ortLibraryDir, 'libonnxruntime.so.1');
  if (!existsSync(ortLibrary)) throw new ChorusError('CHORUS_FILE_MISSING', `onnxruntime-node's library is not at ${ortLibrary} (the native engine is built for linux x64)`);
  const nodeInclude = [join(dirname(process.execPath), '..', 'include', 'node'), '/usr/include/node', '/usr/local/include/node'].find((dir) => existsSync(join(dir, 'node_api.h')));
  if (nodeInclude === undefined) throw new ChorusError('CHORUS_FILE_MISSING', `Node's headers (node_api.h) are not beside ${process.execPath}, in /usr/include/node or /usr/local/include/node`);
  const addonApi = dirname(require.resolve('node-addon-api/package.json'));

  mkdirSync(NATIVE_BUILD_DIR, { recursive: true });
  const ortInclude = ortHeaders();
  const cmakeDir = join(NATIVE_BUILD_DIR, 'cmake');
  // A build folder configured for another checkout (a copied build/) starts afresh.
  const cache = join(cmakeDir, 'CMakeCache.txt');
  if (existsSync(cache) && !readFileSync(cache, 'utf8').includes(`CMAKE_HOME_DIRECTORY:INTERNAL=${SOURCE_DIR}\n`)) rmSync(cmakeDir, { recursive: true, force: true });
  const define = {
    CMAKE_BUILD_TYPE: 'Release',
    CHORUS_CUDA: cuda ? 'ON' : 'OFF',
    NODE_INCLUDE_DIR: nodeInclude,
    NODE_ADDON_API_DIR: addonApi,
    ORT_INCLUDE_DIR: ortInclude,
    ORT_LIBRARY: ortLibrary,
    ORT_LIBRARY_DIR: ortLibraryDir,
    ...(cuda ? { CMAKE_CUDA_COMPILER: nvcc! } : {}),
  };
  log(`configure (CUDA kernels: ${cuda ? `yes, ${nvcc}` : 'no'})`);
  run('cmake', ['-S', SOURCE_DIR, '-B', cmakeDir, ...Object.entries(define).map(([k, v]) => `-D${k}=${v}`)], log);
  log('compile');
  run('cmake', ['--build', cmakeDir, '--parallel'], log);
  // A new file renamed over the old: processes that have the old one loaded keep their copy intact.
  copyFileSync(join(cmakeDir, 'chorus_native.node'), `${NATIVE_ADDON}.new`);
  renameSync(`${NATIVE_ADDON}.new`, NATIVE_ADDON);
  writeFileSync(NATIVE_STAMP, `${JSON.stringify({ cuda, sources: sourcesDigest() })}\n`);
  log(`built ${NATIVE_ADDON}`);
  return { addon: NATIVE_ADDON, cuda };
}

/** The kept headers' folder, checked against the library's C API version. */
function ortHeaders(): string {
  const version = /#define ORT_API_VERSION (\d+)/.exec(readFileSync(join(ORT_INCLUDE, 'onnxruntime_c_api.h'), 'utf8'))?.[1];
  if (Number(version) !== ORT_API_VERSION) throw new ChorusError('CHORUS_INTERNAL', `${ORT_INCLUDE} has C API version ${version}; onnxruntime-node 1.29 needs ${ORT_API_VERSION}`);
  return ORT_INCLUDE;
}

/** A digest of what the addon is built from: src/native's sources and headers, and Node's module ABI. */
export function sourcesDigest(): string {
  const hash = createHash('sha256').update(`node-abi ${process.versions.modules}\n`);
  for (const dir of [SOURCE_DIR, ORT_INCLUDE]) {
    for (const name of readdirSync(dir).sort()) {
      if (!/\.(cc|cu|cuh|h|txt)$/.test(name)) continue;
      hash.update(`${name}\n`).update(readFileSync(join(dir, name)));
    }
  }
  return hash.digest('hex');
}

/** The stamp of the addon in build/native, when one was built here. */
export function builtStamp(): { cuda: boolean; sources: string } | undefined {
  if (!existsSync(NATIVE_ADDON) || !existsSync(NATIVE_STAMP)) return undefined;
  try {
    const stamp = JSON.parse(readFileSync(NATIVE_STAMP, 'utf8')) as { cuda?: unknown; sources?: unknown };
    return typeof stamp.cuda === 'boolean' && typeof stamp.sources === 'string' ? { cuda: stamp.cuda, sources: stamp.sources } : undefined;
  } catch {
    return undefined;
  }
}

/** nvcc on PATH or in /usr/local/cuda/bin. */
export function findNvcc(): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/local/cuda/bin']) {
    const candidate = join(dir, 'nvcc');
    if (dir !== '' && existsSync(candidate) && statSync(candidate).isFile()) return candidate;
  }
  return undefined;
}

function requireTool(command: string, args: string[], what: string): void {
  const result = spawnSync(command, args, { stdio: 'ignore' });
  if (result.error !== undefined || result.status !== 0) throw new ChorusError('CHORUS_UNSUPPORTED', `building the native engine needs ${what}`);
}

function run(command: string, args: string[], log: (line: string) => void): void {
  const result = spawnSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (result.error !== undefined || result.status !== 0) {
    const lines = `${result.stdout ?? ''}${result.stderr ?? ''}`.trim().split('\n');
    const first = result.error?.message ?? lines.find((line) => /error/i.test(line))?.trim() ?? lines.at(-1);
    throw new ChorusError('CHORUS_INTERNAL', `${command} ${args.slice(0, 2).join(' ')} failed: ${first}\n${lines.slice(-30).join('\n')}`);
  }
  for (const line of `${result.stdout}`.split('\n')) if (/error|warning/i.test(line)) log(line);
}
