/**
 * Builds the native engine's addon (`npm run build:native`, `chorus setup cuda --build-engine`): ONNX
 * Runtime's C/C++ API headers from the npm registry (the package below carries the 1.29 headers; they
 * are extracted into build/native, never committed), then CMake over src/native against
 * onnxruntime-node's own libonnxruntime.so.1, with the CUDA kernels when nvcc is there (sm_80, sm_90).
 * The result is build/native/chorus_native.node.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ChorusError } from '../errors.ts';

/** The npm package whose ONNX Runtime framework carries the C/C++ API headers of 1.29. */
export const ORT_HEADERS_PACKAGE = 'com.github.asus4.onnxruntime@0.4.9';
/** The C API version those headers and onnxruntime-node 1.29's library share. */
export const ORT_API_VERSION = 29;

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
/** Where the build goes; the addon itself is `NATIVE_ADDON`. */
export const NATIVE_BUILD_DIR = join(ROOT, 'build', 'native');
export const NATIVE_ADDON = join(NATIVE_BUILD_DIR, 'chorus_native.node');

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
  const ortInclude = ortHeaders(log);
  const cmakeDir = join(NATIVE_BUILD_DIR, 'cmake');
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
  run('cmake', ['-S', join(ROOT, 'src', 'native'), '-B', cmakeDir, ...Object.entries(define).map(([k, v]) => `-D${k}=${v}`)], log);
  log('compile');
  run('cmake', ['--build', cmakeDir, '--parallel'], log);
  copyFileSync(join(cmakeDir, 'chorus_native.node'), NATIVE_ADDON);
  log(`built ${NATIVE_ADDON}`);
  return { addon: NATIVE_ADDON, cuda };
}

/** The headers' folder, fetched and extracted once. */
function ortHeaders(log: (line: string) => void): string {
  const include = join(NATIVE_BUILD_DIR, 'ort-include');
  if (existsSync(join(include, 'onnxruntime_cxx_api.h'))) return include;
  const download = join(NATIVE_BUILD_DIR, 'download');
  rmSync(download, { recursive: true, force: true });
  mkdirSync(download, { recursive: true });
  log(`fetch ONNX Runtime's headers (${ORT_HEADERS_PACKAGE}, about 150 MB, from the npm registry)`);
  run('npm', ['pack', ORT_HEADERS_PACKAGE, '--pack-destination', download, '--silent'], log);
  const tarball = readdirSync(download).find((name) => name.endsWith('.tgz'));
  if (tarball === undefined) throw new ChorusError('CHORUS_FILE_MISSING', `npm pack ${ORT_HEADERS_PACKAGE} gave no tarball`);
  const headers = 'package/Plugins/iOS~/onnxruntime.xcframework/ios-arm64/onnxruntime.framework/Headers';
  run('tar', ['xzf', join(download, tarball), '-C', download, '--wildcards', `${headers}/*`], log);
  mkdirSync(include, { recursive: true });
  for (const name of readdirSync(join(download, headers))) copyFileSync(join(download, headers, name), join(include, name));
  rmSync(download, { recursive: true, force: true });
  const version = /#define ORT_API_VERSION (\d+)/.exec(readFileSync(join(include, 'onnxruntime_c_api.h'), 'utf8'))?.[1];
  if (Number(version) !== ORT_API_VERSION) {
    rmSync(include, { recursive: true, force: true });
    throw new ChorusError('CHORUS_INTERNAL', `${ORT_HEADERS_PACKAGE} has C API version ${version}; onnxruntime-node 1.29 needs ${ORT_API_VERSION}`);
  }
  return include;
}

function findNvcc(): string | undefined {
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
    const output = `${result.stdout ?? ''}${result.stderr ?? ''}`.trim().split('\n').slice(-30).join('\n');
    throw new ChorusError('CHORUS_INTERNAL', `${command} ${args.slice(0, 2).join(' ')} failed${result.error ? `: ${result.error.message}` : ''}\n${output}`);
  }
  for (const line of `${result.stdout}`.split('\n')) if (/error|warning/i.test(line)) log(line);
}
