/**
 * The native engine's build at `npm install` (scripts/install-native.ts): for the CPU unless
 * CHORUS_BUILD_NATIVE asks otherwise, skipped when build/native already holds an addon built from the
 * same sources, and never failing: a build that cannot run leaves its reason in build/native for
 * `chorus doctor` and the TypeScript engine runs.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { builtStamp, buildNative, NATIVE_BUILD_DIR, sourcesDigest } from './build.ts';

/** Why the last install did not build the addon (its first line), when it did not. */
export const NATIVE_INSTALL_ERROR = join(NATIVE_BUILD_DIR, 'install-error.txt');

/** CHORUS_BUILD_NATIVE's values: cpu (the default), cuda (with the CUDA kernels, needs nvcc), auto (CUDA when nvcc is found), off. */
const MODES = ['cpu', 'cuda', 'auto', 'off'] as const;
type Mode = (typeof MODES)[number];

/** Builds the addon if need be; gives the one line the install prints. Throws nothing. */
export function installNative(env: NodeJS.ProcessEnv = process.env): string {
  const asked = env.CHORUS_BUILD_NATIVE ?? 'cpu';
  if (!(MODES as readonly string[]).includes(asked)) return `chorus: native engine not built: CHORUS_BUILD_NATIVE must be one of ${MODES.join(', ')}, got "${asked}"`;
  const mode = asked as Mode;
  if (mode === 'off') return 'chorus: native engine not built (CHORUS_BUILD_NATIVE=off); the TypeScript engine runs';
  const started = Date.now();
  try {
    const stamp = builtStamp();
    // An addon built with the CUDA kernels (npm run build:native) keeps them when rebuilt.
    const cuda = mode === 'cuda' ? true : mode === 'auto' ? 'auto' : (stamp?.cuda ?? false);
    if (stamp !== undefined && stamp.sources === sourcesDigest() && (stamp.cuda || cuda !== true)) {
      return `chorus: native engine up to date (${stamp.cuda ? 'cpu, cuda' : 'cpu'})`;
    }
    const built = buildNative({ cuda });
    rmSync(NATIVE_INSTALL_ERROR, { force: true });
    return `chorus: native engine built (${built.cuda ? 'cpu, cuda' : 'cpu'}) in ${Math.round((Date.now() - started) / 1000)} s`;
  } catch (error) {
    const reason = (error instanceof Error ? error.message : String(error)).split('\n')[0]!;
    try {
      mkdirSync(NATIVE_BUILD_DIR, { recursive: true });
      writeFileSync(NATIVE_INSTALL_ERROR, `${reason}\n`);
    } catch {
      // The reason is printed below either way.
    }
    return `chorus: native engine not built (${reason}); the TypeScript engine runs (npm run build:native retries)`;
  }
}

/** The reason the last install left, if its build failed. */
export function installError(): string | undefined {
  return existsSync(NATIVE_INSTALL_ERROR) ? readFileSync(NATIVE_INSTALL_ERROR, 'utf8').trim() : undefined;
}
